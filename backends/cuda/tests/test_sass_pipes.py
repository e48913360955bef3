"""``sass_pipes.py`` without nvcc: cuobjdump's lines become one instruction each (predicates kept, addresses and
encodings dropped), opcodes go to their pipes by family, and a path counts its ranges as many times as it says."""

from __future__ import annotations

import pytest

from bench_scripts import bench_script

_SASS = """
        code for sm_90a
                Function : moe_topk_routing_kernel
        /*0000*/                   LDC R1, c[0x0][0x28] ;                    /* 0x00000a00ff017b82 */
                                                                             /* 0x000fe20000000800 */
        /*0010*/                   REDUX.MAX.S32 UR4, R26 ;                  /* 0x00000000001a73c4 */
        /*0020*/                   ISETP.NE.AND P1, PT, R26, R15, PT ;       /* 0x0000000f1a00720c */
        /*0030*/              @!P1 SEL R22, R21, R26, !P1 ;                 /* 0x0000001a15167207 */
        /*0040*/                   IMAD.U32 R15, RZ, RZ, UR4 ;               /* 0x00000004ff0f7e24 */
        /*0050*/                   VIMNMX3 R9, R18, R9, R16, PT ;           /* 0x0000000912097216 */
        /*0060*/              @P2 BRA 0xd10 ;                               /* 0x0000000c00a02947 */
"""


def _tool():
    return bench_script("sass_pipes")


def test_a_listing_is_the_instructions_and_each_goes_to_its_pipe():
    tool = _tool()
    lines = tool.listing(_SASS)
    assert lines == ["LDC R1, c[0x0][0x28]", "REDUX.MAX.S32 UR4, R26", "ISETP.NE.AND P1, PT, R26, R15, PT",
                     "@!P1 SEL R22, R21, R26, !P1", "IMAD.U32 R15, RZ, RZ, UR4", "VIMNMX3 R9, R18, R9, R16, PT",
                     "@P2 BRA 0xd10"]
    pipes, alu = tool.by_pipe(lines)
    assert pipes == {"memory": 1, "warp": 1, "alu": 3, "fma": 1, "BRA": 1}
    assert alu == {"ISETP": 1, "SEL": 1, "VIMNMX3": 1}


def test_a_path_counts_each_range_as_often_as_it_says_and_refuses_one_outside_the_listing():
    tool = _tool()
    lines = tool.listing(_SASS)
    along = tool.path_lines(lines, "1-2,3-4*3")
    assert along == lines[:2] + lines[2:4] * 3
    assert tool.by_pipe(along)[0]["alu"] == 6
    for bad in ("0-2", "3-2", "1-8", "1-2*x"):
        with pytest.raises(SystemExit, match="is not A-B or A-B"):
            tool.path_lines(lines, bad)
