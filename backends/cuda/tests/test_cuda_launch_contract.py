"""Every TileLang kernel's launcher conforms to its interface's launch signature, checked without a GPU.

The launchers are closures made per build key, so the core checks them when they are built
(``tileops_core.kernels.contract.check_built``), on a GPU. Here each class's ``launcher(key)``
runs with its compiled functions stood in for (the build functions it calls are replaced), so a
launcher that drifts from its interface fails on the CPU, before any GPU run.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterator

import pytest

pytest.importorskip("torch")

from tileops_core.kernels.annotations import resolved_signature  # noqa: E402
from tileops_core.kernels.contract import declared_launch, mismatches  # noqa: E402
from tileops_cuda import registered  # noqa: E402
from tileops_cuda.stand_ins import stood_in  # noqa: E402
from tileops_cuda.kernels import moe_permute, moe_topk_routing, moe_unpermute, qk_norm_rope  # noqa: E402
from tileops_cuda.kernels import moe_grouped_experts, moe_shared_expert  # noqa: E402
from tileops_cuda.kernels import attention_decode, attention_prefill, chunk_gdr, conv1d, rgdr  # noqa: E402


def _unused(*args: Any) -> None:
    raise AssertionError("a stand-in compiled function is never called here")


#: A build key each launcher can be made from (only the fields a launcher reads matter).
ANY_KEY = SimpleNamespace(dtype="float16", hidden=256, has_weight=True, length=256, width=256, n=256, k=256, heads=8,
                          num_groups=8, affine=True, arch="sm_90")
KEYS: dict[str, Any] = {
    "TileLangSum": ("float16", "float16", "sm_90"),
    "TileLangRGDR": rgdr.RGDRBuildKey(input_dtype="bfloat16", state_dtype="bfloat16", num_k_heads=2, num_v_heads=4,
                                      head_k_dim=128, head_v_dim=128),
    "TileLangCausalConv1dUpdate": conv1d.ConvUpdateBuildKey("bfloat16", 256, 4),
    "TileLangCausalConv1dVarlen": conv1d.ConvVarlenBuildKey("bfloat16", 256, 4),
    "TileLangQKNormRope": qk_norm_rope.QKNormRopeBuildKey("bfloat16", "int64", 16, 2, 256),
    "TileLangMoETopKRouting": moe_topk_routing.MoETopKRoutingBuildKey("bfloat16", "int64", 512, 10),
    "TileLangMoEUnpermute": moe_unpermute.MoEUnpermuteBuildKey("bfloat16", "int32", "bfloat16", 2048, 10),
    "TileLangMoEPermute": moe_permute.MoEPermuteBuildKey("bfloat16", "int64", 2048, 10, 512),
    "TileLangMoEGroupedExperts": moe_grouped_experts.MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512,
                                                                                skinny_max_rows=256),
    "TileLangMoESharedExpert": moe_shared_expert.MoESharedExpertBuildKey("bfloat16", 2048, 512, True, skinny_rows=4),
    "TileLangChunkGDR": chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128),
    "TileLangAttentionDecode": attention_decode.DecodeBuildKey("bfloat16", 16, 2, 256),
    "TileLangAttentionPrefill": attention_prefill.PrefillBuildKey("bfloat16", 16, 2, 256),
}


@pytest.fixture
def stand_ins() -> Iterator[None]:
    with stood_in(_unused, sm_count=4):  # every build function, where the classes that call it look it up
        yield


@pytest.mark.parametrize("impl", registered.KERNELS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("has_weight", [True, False])
def test_the_launcher_of_each_tilelang_kernel_conforms_to_its_interface(stand_ins: None, impl: Any,
                                                                        has_weight: bool) -> None:
    key = KEYS.get(impl.__name__, SimpleNamespace(**{**vars(ANY_KEY), "has_weight": has_weight,
                                                                  "affine": has_weight}))
    declared = declared_launch(impl.interface())
    assert declared is not None
    launcher = impl.launcher(key)
    assert mismatches(declared, launcher, impl.writes_outputs) == []
    # Its annotations can be read (tileops_core.kernels.annotations raises where one cannot), so the types were
    # compared too: an annotation the reader leaves out would drop that comparison without a word.
    resolved_signature(launcher)
