"""``bench/ncu_sass_hotspots.py`` reads Nsight Compute's per-instruction source page as the device writes it.

The GPU call brings back only the summary's lines in its output; a parser that put one kernel's rows under
another, or lost the reasons, would send a session after the wrong instruction. The file here is laid out as
``ncu --page source --print-source sass --csv`` lays it out (a line naming the kernel, a header, a row an
instruction), for two kernels, so the test runs without a GPU.
"""

import sys

import pytest

from bench_scripts import bench_script

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed", "stall_long_sb", "stall_barrier", "stall_wait"]


@pytest.fixture(scope="module")
def hotspots():
    yield bench_script("ncu_sass_hotspots")
    sys.modules.pop("ncu_sass_hotspots", None)


def _csv(tmp_path, kernels):
    lines = []
    for name, rows in kernels:
        lines.append(f'"Kernel Name","{name}"')
        lines.append(",".join(f'"{h}"' for h in HEADER))
        lines += [",".join(f'"{c}"' for c in row) for row in rows]
    path = tmp_path / "source.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_kernel_keeps_its_own_rows_and_the_hottest_instruction_leads(hotspots, tmp_path):
    split = [["0x7f00", "LDG.E.128 R4, desc[UR4][R2.64]", "10", "9", "128", "8", "0", "2"],
             ["0x7f10", "SYNCS.PHASECHK.TRANS64 P0, [UR8], R3", "1,200", "1100", "256", "0", "1000", "200"],
             ["0x7f20", "HMMA.16816.F32.BF16 R8, R12, R16, R8", "40", "30", "512", "0", "0", "40"]]
    combine = [["0x9000", "LDG.E R2, desc[UR4][R4.64]", "300", "290", "16", "300", "0", "0"],
               ["0x9010", "STG.E.U16 desc[UR4][R6.64], R2", "5", "1", "16", "0", "0", "5"]]
    tables = hotspots.read_tables(_csv(tmp_path, [("decode_split_kernel", split), ("decode_combine_kernel", combine)]))
    assert [t.name for t in tables] == ["Kernel Name decode_split_kernel", "Kernel Name decode_combine_kernel"]
    assert [len(t.rows) for t in tables] == [3, 2]
    lines = hotspots.summarise(tables[0], top=2, bins=3)
    assert "1250 samples" in lines[0] and "1139 not issued" in lines[0]  # "1,200" read as 1200
    assert lines[1].startswith("   reasons: barrier 80.0%, wait 19.4%, long_sb 0.6%")
    hottest = lines[lines.index(next(line for line in lines if "hottest" in line)) + 1]
    assert "0x7f10" in hottest and "SYNCS.PHASECHK" in hottest and "barrier 83%" in hottest
    assert hottest.lstrip().startswith("96.0%")
    combine_lines = hotspots.summarise(tables[1], top=5, bins=20)
    assert "305 samples" in combine_lines[0] and "long_sb 98.4%" in combine_lines[1]


def test_a_file_without_a_sass_table_is_an_error_naming_the_columns(hotspots, tmp_path, monkeypatch):
    path = tmp_path / "empty.csv"
    path.write_text('"==ERROR== no kernels were profiled"\n')
    assert hotspots.read_tables(path) == []
    monkeypatch.setattr("sys.argv", ["ncu_sass_hotspots.py", str(path)])
    with pytest.raises(SystemExit, match="no SASS table"):
        hotspots.main()
