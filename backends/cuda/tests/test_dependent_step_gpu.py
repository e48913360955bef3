"""A model's decode steps with the kernels launched as programmatic dependents give the plain launches' bits.

The registered keys launch every kernel whose key has ``dependent_launch`` (and the skinny programs) as a
dependent (``tileops_cuda.launch_policy``); a dependent waits for the previous kernel before any access, so
a step's logits must equal, bit for bit, those of the same model with every such field off
(``dependent_launches(False)``): the tiny Qwen3.5-MoE (random init, GPU
head sizes, every module on TileOPs) over a prefill and four decode steps, eager and replayed from a CUDA
graph. Needs a GPU, tilelang and transformers; skips otherwise.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

STEPS = 4


@pytest.fixture(autouse=True)
def _no_contents_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A captured session refuses the contents checks (they read tensors on the host)."""
    monkeypatch.setenv("TILEOPS_CHECK_CONTENTS", "0")


@pytest.mark.parametrize("capture", ["eager", "cuda_graph"])
def test_dependent_kernels_give_the_plain_kernels_bits_over_a_models_decode_steps(cuda_device, capture):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tileops_core.integrations.transformers import apply_tileops, build_kernels, static_decode_session
    from tileops_core.integrations.transformers._tiny import GPU_HEAD_SIZES, tiny_model
    from tileops_cuda.launch_policy import dependent_launches

    base = tiny_model("qwen3_5_moe", seed=50, **GPU_HEAD_SIZES)
    base = base.to("cuda", torch.bfloat16)
    g = torch.Generator().manual_seed(51)
    ids = torch.randint(1, base.config.vocab_size, (2, 9), generator=g).cuda()
    mask = torch.ones_like(ids)
    tokens = [torch.randint(1, base.config.vocab_size, (2,), generator=g).cuda() for _ in range(STEPS)]

    def run(model):
        assert build_kernels(apply_tileops(model, every_module=True).kernel_calls) == []
        session = static_decode_session(model, 2, 16, capture=capture)
        return [session.prefill(ids, mask).float()] + [session.step(t).float() for t in tokens]

    with dependent_launches(False):
        plain = run(copy.deepcopy(base))
    with dependent_launches(True):
        dependent = run(copy.deepcopy(base))
    # the dependent model really ran dependent builds (a cached plain selection would make this test vacuous)
    assert {"ZeroCentredRMSNormBuildKey", "MoEPermuteBuildKey", "MoEUnpermuteBuildKey", "DecodeBuildKey",
            "SkinnyLinearTiling", "MoESkinnyTiling"} <= _dependent_builds()
    for step, (a, b) in enumerate(zip(plain, dependent)):
        assert torch.equal(a, b), f"step {step}: max |diff| {(a - b).abs().max().item()}"


def _dependent_builds() -> set[str]:
    """The build keys' class names, among the kernels this process built, that launch as dependents."""
    from tileops_cuda.kernels import _common

    found: set[str] = set()

    def walk(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            if getattr(x, "dependent_launch", False):
                found.add(type(x).__name__)
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name))
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)

    walk(list(_common._BUILT))
    return found
