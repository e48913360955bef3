"""The generated documentation: every op has a page, the support matrix is asked of the kernels."""

from __future__ import annotations

import re

import pytest

from tileops_core import load_manifest
from tileops_core.bench.catalog import benchable_specs, resolve_specs
from tileops_core.docsgen.blocks import Bullets, Link, Page, Para, Table, to_html, to_markdown
from tileops_core.docsgen.matrix import support_matrix
from tileops_core.docsgen.site import write_docs
from tileops_core.docsgen.summary import kernel_rows, refusal_regions
from tileops_core.kernels import KernelEntry, registry
from tileops_core.ops.normalization import RMSNormKernel
from tileops_core.plugins import ensure_plugins_loaded


@pytest.fixture
def fake_gpu_kernel(fresh_registry):
    """A CUDA RMSNorm kernel (registered for the test only) that refuses float32 and, on sm_80,
    hidden sizes above 4096."""
    ensure_plugins_loaded()

    class FakeFastRMSNorm(RMSNormKernel):
        devices = ("cuda",)
        supported_archs = ("sm_80", "sm_90")

        @classmethod
        def refusal(cls, call):
            if call.dtypes["x"] == "float32":
                return "float32 was not written"
            if call.arch == "sm_80" and call.dims["N"][0] > 4096:
                return f"hidden {call.dims['N'][0]} > 4096 does not fit sm_80 registers"
            return None

        @classmethod
        def entry_for(cls, call):
            return KernelEntry(("fake",), lambda: None)

    registry.register_backend(registry.BackendInfo("fakegpu", device_types=("cuda",)))
    registry.register_kernel(FakeFastRMSNorm, "fakegpu")
    return FakeFastRMSNorm


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    ensure_plugins_loaded()
    out = tmp_path_factory.mktemp("docs")
    return out, write_docs(out)


def test_every_op_of_the_manifest_has_a_markdown_and_an_html_page(site):
    out, written = site
    for name in load_manifest():
        md = (out / "ops" / f"{name}.md").read_text()
        html = (out / "ops" / f"{name}.html").read_text()
        assert md.startswith(f"# {name}\n") and f"<h1>{name}</h1>" in html
        assert "## Signature" in md and "## Workloads" in md and "## Roofline" in md
    assert len(written) == 2 * (len(load_manifest()) + 1)


def test_the_index_lists_and_links_every_op_and_the_installed_backend(site):
    out, _ = site
    index_md, index_html = (out / "index.md").read_text(), (out / "index.html").read_text()
    for name in load_manifest():
        assert f"[{name}](ops/{name}.md)" in index_md
        assert f'href="ops/{name}.html"' in index_html
    assert "| cpu_ref | tileops-cpu-ref |" in index_md


def test_an_op_page_shows_its_declarations_as_written(site):
    out, _ = site
    page = (out / "ops" / "GemmFwdOp.md").read_text()
    assert "| a | float16 \\| bfloat16 \\| float32 | match trans_a: false -> [M, K]; true -> [K, M] |" in page
    assert "| trans_b | bool | True |" in page
    assert "| tiny-nt | float32 | M=64, N=128, K=96, trans_a=False, trans_b=True | 1,572,864 | 106,496 |" in page
    assert "| flops | 2 * M * N * K |" in page


def test_rgdr_page_lists_its_mutated_state_and_optional_gates(site):
    out, _ = site
    page = (out / "ops" / "RecurrentGatedDeltaRuleFwdOp.md").read_text()
    assert "| state | float16 \\| bfloat16 \\| float32 | [S, NV, DV, DK] | mutated |" in page
    assert "| gk | float32 | [T, NV, *G] | optional |" in page
    assert "| tiny-fp32 | float32 | B=3, NK=2, NV=4, DK=16, DV=32, state_dtype=float32 (generator rgdr_decode: " \
           "tokens_per_seq=2) | 73,728 | 81,504 |" in page


def test_the_matrix_probes_every_row_in_every_declared_dtype():
    ensure_plugins_loaded()
    (support,) = support_matrix(resolve_specs(["ReciprocalFwdOp"]))
    assert support.dtypes == ["float16", "bfloat16", "float32", "int8", "int16", "int32", "int64", "uint8"]
    headers, rows = kernel_rows(support)
    assert headers[:4] == ["kernel", "backend", "device", "arch"]
    (ref,) = rows
    assert ref.kernel.endswith(":RefReciprocal") and ref.device == "any"
    assert ref.cells == ("3/3",) * 8


def test_refusal_regions_name_each_reason_and_the_calls_refused(fake_gpu_kernel):
    (support,) = support_matrix(resolve_specs(["RMSNormFwdOp"]))
    _, rows = kernel_rows(support)
    fake = {r.archs: r.cells for r in rows if r.kernel.endswith("FakeFastRMSNorm")}
    assert support.dtypes == ["float16", "bfloat16", "float32"]
    assert fake == {("sm_80",): ("4/6", "4/6", "0/6"), ("sm_90",): ("6/6", "6/6", "0/6")}
    regions = {(r.archs, r.reason): r.calls for r in refusal_regions(support)}
    assert regions[(("sm_80", "sm_90"), "float32 was not written")] == (
        "small-fp32[float32]", "small-fp32-weight[float32]", "llama3-8b-prefill-2k[float32]",
        "qwen3-14b-decode-256[float32]", "decode-m1-4096[float32]", "llama3-70b-prefill-16k[float32]")
    assert regions[(("sm_80",), "hidden 8192 > 4096 does not fit sm_80 registers")] == (
        "llama3-70b-prefill-16k[float16]", "llama3-70b-prefill-16k[bfloat16]")


def test_a_refusal_that_raises_is_shown_as_such(fake_gpu_kernel):
    fake_gpu_kernel.refusal = classmethod(lambda cls, call: 1 / 0)
    (support,) = support_matrix(resolve_specs(["RMSNormFwdOp"]))
    reasons = {r.reason for r in refusal_regions(support)}
    assert reasons == {"refusal() raised ZeroDivisionError: division by zero"}


def test_every_implemented_op_is_served_by_the_reference_backend():
    ensure_plugins_loaded()
    matrix = support_matrix()
    assert {s.spec.name for s in matrix} == set(benchable_specs())
    for support in matrix:
        assert not support.unserved and not support.problems, support.spec.name
        assert any(c.backend == "cpu_ref" and c.status == "yes" for c in support.cells)


def test_renderers_escape_what_they_are_given():
    page = Page("A <b> title", "ops/X").add(Para(["see ", Link("index", "index"), " <script>"]),
                                           Table(["a|b"], [["x | y"]]))
    html, md = to_html(page), to_markdown(page)
    assert "<script>" not in html and "&lt;script&gt;" in html and 'href="../index.html"' in html
    assert "| x \\| y |" in md and "[index](../index.md)" in md
    assert not re.search(r"(?<!\\)<", md) and "\\<script>" in md  # every < escaped (found in review: none was)
    bullets = to_markdown(Page("t", "ops/X").add(Bullets(["a refusal reason\nof two lines", "next"])))
    assert "- a refusal reason of two lines\n- next" in bullets


def test_pages_of_ops_that_are_gone_are_removed_and_nothing_else(tmp_path):
    ensure_plugins_loaded()
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "OldFwdOp.md").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / ".tileops-docs").write_text("ops/OldFwdOp.md\nindex.md\n")
    write_docs(tmp_path, ("md",))
    assert not (tmp_path / "ops" / "OldFwdOp.md").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "index.md").is_file()


@pytest.fixture(scope="module")
def one_matrix():
    """The support matrix of the installed backends, made once for the write tests below."""
    ensure_plugins_loaded()
    return support_matrix(benchable_specs().values())


def test_a_run_removes_only_its_own_stale_pages_and_never_follows_the_list_outside_the_folder(tmp_path, one_matrix):
    """Found in review: entries of the `.tileops-docs` list were unlinked wherever they pointed."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    (victim / "abs.txt").write_text("precious")
    write_docs(out, ("md",), one_matrix)
    (out / "ops" / "GoneFwdOp.md").write_text("a page of an op that no longer exists")
    with (out / ".tileops-docs").open("a") as ledger:
        ledger.write(f"ops/GoneFwdOp.md\n../victim/keep.txt\n{victim / 'abs.txt'}\nnotes.md/../../victim/keep.txt\n")
    write_docs(out, ("md",), one_matrix)
    assert not (out / "ops" / "GoneFwdOp.md").exists()
    assert (victim / "keep.txt").read_text() == (victim / "abs.txt").read_text() == "precious"


def test_a_run_in_one_format_keeps_the_pages_of_the_other(tmp_path, one_matrix):
    """Found in review: `--format html` after a run of both deleted every Markdown page."""
    both = write_docs(tmp_path, ("md", "html"), one_matrix)
    write_docs(tmp_path, ("html",), one_matrix)
    assert all(p.is_file() for p in both)
    write_docs(tmp_path, ("md",), one_matrix)  # and the list still names the html pages, so a later run can
    assert all(p.is_file() for p in both)


def test_a_folder_blocked_by_a_file_fails_the_run_before_any_page_is_written(tmp_path, one_matrix):
    (tmp_path / "ops").write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=r"ops is a file where the pages need a folder"):
        write_docs(tmp_path, ("md",), one_matrix)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops"]


def test_tileops_ops_counts_an_op_as_served_only_where_a_kernel_serves_a_probed_call():
    """Found in review: an op whose one kernel refused every call was counted as served."""
    from tileops_core.cli.cmd_ops import format_matrix
    from tileops_core.docsgen.matrix import OpSupport, RefusalRegion, SupportCell

    specs = resolve_specs(["RMSNormFwdOp", "SoftmaxFwdOp"])

    def cell(op, served):
        return SupportCell(op, "K", "m:K", "b", False, "cpu", ("cpu",), "float32", served,
                           () if served else (RefusalRegion("no", ("row[float32]",)),))

    matrix = [OpSupport(specs[0], ["float32"], [cell("RMSNormFwdOp", ("row[float32]",))]),
              OpSupport(specs[1], ["float32"], [cell("SoftmaxFwdOp", ())])]
    assert format_matrix(matrix).splitlines()[-1].startswith("2 op(s), 1 served by an installed kernel")
