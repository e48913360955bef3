"""Hardware profiles (the ceilings) and where a measured call sits under them."""

from __future__ import annotations

import pytest

from tileops_core import TileOpsError
from tileops_core.bench.calibrate import CalibrationSizes, calibrate
from tileops_core.bench.catalog import UsageError
from tileops_core.bench.metrics import analyse
from tileops_core.bench.profiles import HardwareProfile, Rate, dump_profile, load_profile, profile_for
from tileops_core.roofline import Roofline
from tileops_core.bench.timing import TimingOptions


@pytest.fixture(autouse=True)
def empty_user_profiles(tmp_path, monkeypatch):
    """No calibration saved on this machine leaks into what a test selects."""
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "user-profiles"))
    return tmp_path / "user-profiles"


def test_h200_profile_ships_the_measured_and_datasheet_figures():
    entry = profile_for("cuda", "NVIDIA H200")
    assert entry is not None and entry.origin == "shipped" and entry.profile.name == "nvidia-h200"
    h200 = entry.profile
    assert h200.bandwidth("measured") == (4.3e12, "measured")
    assert h200.bandwidth("peak") == (4.8e12, "peak")
    assert h200.compute_rate("bfloat16", "measured") == (790e12, "measured", "bfloat16")
    assert h200.compute_rate("bfloat16", "peak") == (989.4e12, "peak", "bfloat16")
    assert h200.compute_rate("float32", "measured") == (66.9e12, "peak", "float32")


def test_a_dtype_the_profile_does_not_list_uses_float32():
    h200 = profile_for("cuda", "NVIDIA H200").profile
    assert h200.compute_rate("int32") == (66.9e12, "peak", "float32")


def test_a_cpu_gets_the_generic_profile_and_an_unknown_gpu_none():
    assert profile_for("cpu", "Some CPU").profile.name == "generic-cpu"
    assert profile_for("cuda", "NVIDIA A100-SXM4-80GB") is None


def test_a_saved_calibration_of_this_device_beats_the_generic_profile(empty_user_profiles):
    empty_user_profiles.mkdir()
    mine = HardwareProfile(name="calibrated-test-cpu", device_type="cpu", match=["Test CPU 9000"],
                           memory=Rate(measured=12e9), compute={"float32": Rate(measured=50e9)})
    (empty_user_profiles / "mine.yaml").write_text(dump_profile(mine))
    chosen = profile_for("cpu", "Test CPU 9000 @ 3GHz")
    assert chosen.origin == "user" and chosen.profile == mine
    assert profile_for("cpu", "Another CPU").profile.name == "generic-cpu"


def test_an_explicit_profile_name_or_path_wins_and_an_unknown_one_is_a_clear_error(tmp_path):
    assert profile_for("cuda", "NVIDIA A100-SXM4-80GB", "nvidia-h200").profile.name == "nvidia-h200"
    with pytest.raises(TileOpsError, match="'nvidia-h200' describes a cuda device; this run is on cpu"):
        profile_for("cpu", "Some CPU", "nvidia-h200")  # (found in review: every efficiency 0.0%)
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile(HardwareProfile(name="x", device_type="cpu", generic=True, memory=Rate(peak=1e9),
                                                 compute={"float32": Rate(peak=1e10)})))
    assert profile_for("cpu", "Some CPU", str(path)).origin == "file"
    with pytest.raises(TileOpsError, match="no hardware profile named 'h900'"):
        profile_for("cpu", "Some CPU", "h900")


def test_a_profile_file_with_a_bad_field_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ndevice_type: cuda\nmatch: [X]\nmemory: {peak: -1}\ncompute: {float32: {peak: 1}}\n")
    with pytest.raises(TileOpsError) as caught:
        load_profile(path)
    assert str(path) in str(caught.value) and "memory.peak" in str(caught.value)


def test_a_profile_must_say_which_devices_it_describes(tmp_path):
    path = tmp_path / "vague.yaml"
    path.write_text("name: vague\ndevice_type: cuda\nmemory: {peak: 1}\ncompute: {float32: {peak: 1}}\n")
    with pytest.raises(TileOpsError, match="match"):
        load_profile(path)


_PROFILE = HardwareProfile(name="toy", device_type="cpu", generic=True, memory=Rate(peak=100.0),
                           compute={"float32": Rate(peak=1000.0)})  # ridge point: 10 FLOP/byte


def test_below_the_ridge_a_call_is_memory_bound_and_measured_against_bandwidth():
    a = analyse(Roofline("T", flops=50, bytes=100), 2.0, _PROFILE, "float32")  # I = 0.5, 50 B/s
    assert a.bound == "memory" and a.ridge == 10
    assert a.attainable_flops_per_s == 50  # 0.5 FLOP/B x 100 B/s
    assert a.efficiency == pytest.approx(25 / 50)


def test_above_the_ridge_a_call_is_compute_bound_and_measured_against_peak_flops():
    a = analyse(Roofline("T", flops=4000, bytes=100), 8.0, _PROFILE, "float32")  # I = 40, 500 FLOP/s
    assert a.bound == "compute"
    assert a.efficiency == pytest.approx(500 / 1000)


def test_without_a_profile_only_achieved_rates_are_reported():
    a = analyse(Roofline("T", flops=10, bytes=40), 2.0, None, "float32")
    assert (a.flops_per_s, a.bytes_per_s, a.bound, a.efficiency) == (5, 20, None, None)


def test_calibrate_measures_copy_and_matmul_on_the_cpu():
    sizes = CalibrationSizes(4 << 20, 128, ("float32",))
    quick = TimingOptions(warmup=1, min_samples=3, min_time_s=0.01, max_time_s=0.5)
    profile = calibrate("cpu", sizes, quick)
    assert profile.device_type == "cpu" and profile.memory.measured > 1e8
    assert profile.compute["float32"].measured > 1e7
    assert profile.memory.peak is None  # a generic profile's nominal peaks are not this CPU's datasheet
    assert load_profile_roundtrip(profile) == profile


def test_calibrated_bandwidth_is_the_faster_of_the_memcpy_and_the_elementwise_copy(monkeypatch):
    """Found on the H200: ``copy_`` of 1 GiB took the memcpy path at 2.71 TB/s, where the elementwise
    kernel moves 4.24 TB/s; a profile calibrated from ``copy_`` alone scored every kernel 1.57x too high."""
    import types

    from tileops_core.bench import calibrate as calibration

    timed = []

    def time_subjects(subjects, device, options):
        timed.extend(s.name for s in subjects)
        medians = {"copy": 2.0, "elementwise copy": 1.0}
        return [types.SimpleNamespace(median_s=medians.get(s.name, 0.5)) for s in subjects]

    monkeypatch.setattr(calibration, "time_subjects", time_subjects)
    profile = calibrate("cpu", CalibrationSizes(4 << 20, 128, ("float32",)))
    assert timed == ["copy", "elementwise copy", "matmul-float32"]
    assert profile.memory.measured == 2 * (4 << 20) / 1.0
    assert profile.compute["float32"].measured == 2 * 128 ** 3 / 0.5


def test_a_calibration_over_a_base_takes_its_peaks_and_none_of_its_measured_figures():
    """Found in review: the base's measured figures (an earlier calibration's, another machine's) were
    written again as this run's, for every dtype the run did not measure."""
    sizes = CalibrationSizes(4 << 20, 128, ("float32",))
    quick = TimingOptions(warmup=1, min_samples=3, min_time_s=0.01, max_time_s=0.5)
    base = HardwareProfile(name="base", device_type="cpu", match=["x"], memory=Rate(peak=5e10, measured=1.0),
                           compute={"float32": Rate(peak=2e12, measured=1.0), "float64": Rate(measured=1.0),
                                    "bfloat16": Rate(peak=4e12, measured=1.0, note="an old run")})
    profile = calibrate("cpu", sizes, quick, base)
    assert profile.memory.peak == 5e10 and profile.memory.measured != 1.0
    assert profile.compute["float32"].peak == 2e12 and profile.compute["float32"].measured != 1.0
    assert profile.compute["bfloat16"] == Rate(peak=4e12) and "float64" not in profile.compute


def test_a_calibration_whose_buffers_cannot_be_held_is_a_usage_error(monkeypatch):
    import torch

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("out of memory (simulated)")

    monkeypatch.setattr(torch, "empty_like", no_memory)
    with pytest.raises(UsageError, match=r"cannot hold the calibration's buffers on cpu \(a copy of 4 MiB"):
        calibrate("cpu", CalibrationSizes(4 << 20, 128, ("float32",)))


def load_profile_roundtrip(profile: HardwareProfile) -> HardwareProfile:
    import yaml

    return HardwareProfile.model_validate(yaml.safe_load(dump_profile(profile)))


@pytest.mark.parametrize("copy_bytes,n,dtypes,message", [
    (1000, 128, ("float32",), "at least 1 MiB"),
    (4 << 20, 8, ("float32",), "at least 64"),
    (4 << 20, 128, ("int8",), "floating dtypes"),
])
def test_calibration_sizes_that_cannot_measure_anything_are_usage_errors(copy_bytes, n, dtypes, message):
    with pytest.raises(UsageError, match=message):
        CalibrationSizes(copy_bytes, n, dtypes)


def test_a_broken_user_profile_is_skipped_with_a_warning_not_fatal(empty_user_profiles):
    empty_user_profiles.mkdir()
    (empty_user_profiles / "broken.yaml").write_text("name: broken\ndevice_type: cpu\n")
    with pytest.warns(RuntimeWarning, match=r"skipping a hardware profile \(user\): .*broken.yaml"):
        assert profile_for("cpu", "Some CPU").profile.name == "generic-cpu"


def test_a_plugin_profile_is_found_for_its_device(monkeypatch, tmp_path):
    from tileops_core import plugins
    from tileops_core.plugins import ProfileSource

    path = tmp_path / "vendor.yaml"
    path.write_text(dump_profile(HardwareProfile(name="vendor-npu", device_type="npu", match=["Ascend 310P"],
                                                 memory=Rate(peak=2e11), compute={"float16": Rate(peak=2e13)})))
    monkeypatch.setattr(plugins, "hardware_profiles", lambda: [ProfileSource("vendorbackend", path)])
    entry = profile_for("npu", "Ascend 310P3")
    assert entry.origin == "plugin:vendorbackend" and entry.profile.name == "vendor-npu"
