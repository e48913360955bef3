"""Lock files: selection follows a lock, a lock it cannot honour is an error naming the lock line.

Each test writes its own lock into ``tmp_path`` and runs in a fresh registry, with no lock
or override in force before or after it.
"""

from __future__ import annotations

import json

import pytest

from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import SelectionError, TileOpsError, __version__
from tileops_core.cli.main import main
from tileops_core.kernels import lock as lock_module
from tileops_core.kernels.lock import call_key, read_lock, set_lock, use_lock, write_lock
from tileops_core.kernels.overrides import use_kernel_overrides
from tileops_core.kernels.select import kernel_for, select_kernel

pytestmark = pytest.mark.usefixtures("fresh_registry")


@pytest.fixture(autouse=True)
def no_lock(monkeypatch):
    monkeypatch.delenv("TILEOPS_LOCK", raising=False)
    lock_module.refresh_env_lock()
    yield
    set_lock(None)
    lock_module.refresh_env_lock()


def fast_and_ref(refuse_n=None):
    """``FastK`` (specialised, refusing N == ``refuse_n``) and the general ``RefK``: the rule picks FastK."""
    iface = make_interface("LockOp")
    fast = make_impl(iface, "FastK", refusal=lambda call: f"N={call.dims['N']} is too odd"
                     if call.dims["N"] == refuse_n else None)
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("fast", fast)
    add_backend("ref", ref)
    return iface, fast, ref


def lock_file(path, *rows, versions=None):
    """A lock holding ``(call, kernel, backend)`` rows: line 1 is the header, row i is line i + 2."""
    write_lock(path, [{"op": c.op, "interface": c.interface, "call": c.as_dict(), "kernel": k, "backend": b}
                      for c, k, b in rows], versions or {"tileops": __version__}, "f")
    return path


def test_selection_follows_the_lock_over_the_rule(tmp_path):
    iface, fast, ref = fast_and_ref()
    call = make_call(iface, N=8)
    set_lock(lock_file(tmp_path / "t.lock", (call, "fakes:RefK", "ref")))
    selection = select_kernel(iface, call)
    assert selection.chosen is ref
    assert selection.candidates[0].line() == f"dropped fakes:FastK [fast]: not the kernel locked at {tmp_path}/t.lock:2"
    assert f"steering: lock {tmp_path}/t.lock:2: fakes:RefK [ref]" in selection.report()


def test_a_call_spec_the_lock_does_not_hold_is_selected_by_the_rule(tmp_path):
    iface, fast, ref = fast_and_ref()
    set_lock(lock_file(tmp_path / "t.lock", (make_call(iface, N=8), "fakes:RefK", "ref")))
    assert select_kernel(iface, make_call(iface, N=16)).chosen is fast


def test_a_locked_kernel_that_refuses_is_an_error_naming_the_lock_line(tmp_path):
    iface, fast, ref = fast_and_ref(refuse_n=8)
    call = make_call(iface, N=8)
    set_lock(lock_file(tmp_path / "t.lock", (make_call(iface, N=4), "fakes:FastK", "fast"), (call, "fakes:FastK", "fast")))
    with pytest.raises(SelectionError) as raised:
        kernel_for(iface, call)
    assert str(raised.value).startswith(f"{tmp_path}/t.lock:3: the lock names fakes:FastK [fast] for this call, and it "
                                        "cannot serve it: refused: N=8 is too odd\n")


def test_a_locked_kernel_that_is_not_installed_is_an_error_naming_the_lock_line(tmp_path):
    iface, fast, ref = fast_and_ref()
    call = make_call(iface, N=8)
    set_lock(lock_file(tmp_path / "t.lock", (call, "fakes:GoneK", "gone")))
    with pytest.raises(SelectionError) as raised:
        kernel_for(iface, call)
    assert str(raised.value) == (
        f"{tmp_path}/t.lock:2: the lock names fakes:GoneK [gone] for {call!r}, and no such kernel is installed "
        f"(implementations of {iface.__name__}: fakes:FastK [fast], fakes:RefK [ref])")


def test_a_locked_kernel_denied_by_an_override_is_an_error_naming_the_lock_line(tmp_path):
    iface, fast, ref = fast_and_ref()
    call = make_call(iface, N=8)
    with use_lock(lock_file(tmp_path / "t.lock", (call, "fakes:FastK", "fast"))), \
            use_kernel_overrides("LockOp=-FastK"), pytest.raises(SelectionError) as raised:
        kernel_for(iface, call)
    assert str(raised.value).startswith(f"{tmp_path}/t.lock:2: the lock names fakes:FastK [fast] for this call, and it "
                                        "cannot serve it: denied by use_kernel_overrides() ('LockOp=-FastK')\n")


def test_a_distribution_at_another_version_than_the_lock_is_warned_about_once(tmp_path):
    iface, fast, ref = fast_and_ref()
    call = make_call(iface, N=8)
    set_lock(lock_file(tmp_path / "t.lock", (call, "fakes:RefK", "ref"), versions={"tileops": "0.0.0-old"}))
    with pytest.warns(RuntimeWarning) as record:
        assert kernel_for(iface, call)() == "RefK"
        kernel_for(iface, make_call(iface, N=16))
    assert [str(w.message) for w in record] == [
        f"lock {tmp_path}/t.lock:1 was made with tileops 0.0.0-old (installed: {__version__}); its kernels are "
        "followed as locked"]


def test_a_malformed_lock_line_is_named(tmp_path):
    path = tmp_path / "t.lock"
    path.write_text('{"tileops_lock": 1}\n{"op": "X"\n')
    with pytest.raises(TileOpsError, match=f"{tmp_path}/t.lock:2: not a JSON line"):
        read_lock(path)


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00garbage\n", "cannot be read"),
    (b'{"tileops_lock": 1, "distributions": [1, 2], "fingerprint": "x"}\n', ":1: the header's distributions"),
], ids=["not-text", "bad-header"])
def test_a_corrupt_lock_is_named_not_a_traceback(tmp_path, content, message):
    """(Found in review: a UnicodeDecodeError or TypeError from every op call.)"""
    path = tmp_path / "t.lock"
    path.write_bytes(content)
    with pytest.raises(TileOpsError, match=message):
        read_lock(path)


def test_tileops_lock_to_a_path_it_cannot_write_is_a_cli_error(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["lock", "RMSNormFwdOp", "-o", str(tmp_path / "afile" / "x.lock")]) != 0
    assert "cannot write -o" in capsys.readouterr().err


def test_tileops_lock_with_an_arch_but_no_device_is_a_cli_error_not_cpu_lines(tmp_path, capsys):
    path = tmp_path / "x.lock"
    assert main(["lock", "RMSNormFwdOp", "--arch", "sm_90", "-o", str(path)]) != 0
    assert "--device" in capsys.readouterr().err
    assert not path.exists()


def test_tileops_lock_reads_a_device_index_as_its_type_and_refuses_a_type_nothing_is_for(tmp_path, capsys):
    """Calls carry a device type (found in review: --device cuda:0 locked every row to the reference kernel
    under device type 'cuda:0', which no call matches, and exited 0)."""
    pytest.importorskip("tileops_cuda")
    indexed, plain = tmp_path / "indexed.lock", tmp_path / "plain.lock"
    assert main(["lock", "RMSNormFwdOp", "--device", "cuda:0", "--arch", "sm_90", "-o", str(indexed)]) == 0
    assert main(["lock", "RMSNormFwdOp", "--device", "cuda", "--arch", "sm_90", "-o", str(plain)]) == 0
    assert indexed.read_text().splitlines()[1:] == plain.read_text().splitlines()[1:]
    rows = [json.loads(line) for line in plain.read_text().splitlines()[1:]]
    assert rows and {r["call"]["device_type"] for r in rows} == {"cuda"} and {r["backend"] for r in rows} == {"cuda"}
    capsys.readouterr()
    assert main(["lock", "RMSNormFwdOp", "--device", "gpu", "--arch", "sm_90", "-o", str(tmp_path / "x.lock")]) == 2
    assert "no installed backend or kernel is for device type 'gpu'" in capsys.readouterr().err
    assert not (tmp_path / "x.lock").exists()


@pytest.mark.parametrize("argv", [["lock", "NoSuchOp"], ["lock", "--device", "cuda"], ["explain", "NoSuchOp"],
                                  ["explain", "RMSNormFwdOp", "--workload", "nope"], ["explain"],
                                  ["explain", "RMSNormFwdOp", "--arch", "sm_90"]])
def test_a_usage_error_of_lock_or_explain_exits_2_like_every_command(argv, tmp_path, capsys):
    """Exit 1 stays for findings (explain: no kernel serves the call), 2 for what the user typed wrong."""
    assert main([*argv, *(["-o", str(tmp_path / "x.lock")] if argv[0] == "lock" else [])]) == 2
    assert f"tileops {argv[0]}: error: " in capsys.readouterr().err


def test_an_unreadable_lock_from_the_environment_fails_the_first_selection(tmp_path, monkeypatch):
    iface, fast, ref = fast_and_ref()
    monkeypatch.setenv("TILEOPS_LOCK", str(tmp_path / "missing.lock"))
    lock_module.refresh_env_lock()
    with pytest.raises(SelectionError, match="TILEOPS_LOCK: lock file .*missing.lock: cannot be read"):
        kernel_for(iface, make_call(iface, N=8))


def test_tileops_lock_records_each_workload_call_spec_and_the_versions(tmp_path, capsys):
    path = tmp_path / "tileops.lock"
    assert main(["lock", "RMSNormFwdOp", "-o", str(path)]) == 0
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["tileops_lock"] == 1 and {"tileops", "torch", "tileops-cpu-ref"} <= set(header["distributions"])
    rows = [json.loads(line) for line in lines[1:]]
    assert rows and {(r["op"], r["kernel"], r["backend"]) for r in rows} == {
        ("RMSNormFwdOp", "tileops_cpu_ref.kernels:RefRMSNorm", "cpu_ref")}
    assert len({json.dumps(r["call"], sort_keys=True) for r in rows}) == len(rows)
    assert f"{path}: {len(rows)} call specs locked for cpu/cpu" in capsys.readouterr().out


def test_the_lock_tileops_lock_wrote_is_followed_by_an_op_call(tmp_path):
    import torch

    from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel

    path = tmp_path / "tileops.lock"
    assert main(["lock", "RMSNormFwdOp", "-o", str(path)]) == 0
    op = RMSNormFwdOp([4096])
    with use_lock(path) as lock:
        op(torch.randn(2, 4096))
        call = op.last_plan.call_specs[RMSNormKernel]
        assert lock.entry_for(call) is not None  # the call is one of the locked rows
        with use_kernel_overrides("RMSNormFwdOp=-RefRMSNorm"), pytest.raises(SelectionError,
                                                                              match=f"{path}:\\d+: the lock names"):
            op(torch.randn(2, 4096))
    assert call_key(call) in read_lock(path).entries


def test_a_recorded_run_locks_the_call_specs_it_bound_and_a_later_run_follows_it(tmp_path):
    from tileops_core.kernels import dispatch_stats
    from tileops_core.kernels.steering import lock_recorded_run

    iface, fast, ref = fast_and_ref()
    dispatch_stats.reset_dispatch_stats()
    with use_kernel_overrides("LockOp=ref"):
        kernel_for(iface, make_call(iface, N=8))
        kernel_for(iface, make_call(iface, N=16))
    assert lock_recorded_run(tmp_path / "run.lock") == 2
    dispatch_stats.reset_dispatch_stats()
    set_lock(tmp_path / "run.lock")
    assert kernel_for(iface, make_call(iface, N=8))() == "RefK"  # the run's choice, not the rule's (FastK)
    assert kernel_for(iface, make_call(iface, N=32))() == "FastK"  # a call the run never made
