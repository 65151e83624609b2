"""The corpus's cases: each Function of ``functions.py`` with seeded float64 inputs (about 4×8),
what its author meant (``expect``), and, where the backward is meant to differ from the forward's
derivative, a ``surrogate``: a plain-torch callable with the same forward whose autograd gradient is
the intended one.

``expect`` is the author's intention, not the oracle: the tests compute the oracle (gradcheck, or
the surrogate's autograd) at test time and check that it agrees with ``expect``, so a case whose
bug no checker could see is caught as a broken case, not counted as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from tests.specimens.corpus import functions as fn

Tensor = torch.Tensor
SHAPE = (4, 8)


@dataclass(frozen=True)
class Case:
    name: str
    idea: str  # where the idea came from, in one line
    function: Callable[..., Any]  # an autograd.Function subclass or any callable
    make_inputs: Callable[[int], tuple]  # seed -> inputs (float64 tensors, integer/bool tensors passed through)
    expect: str  # "pass" or "fail": what the author meant (the oracle must agree; see test_corpus)
    reference: Callable[..., Any] | None = None  # plain torch with the same forward, whose autograd is the truth
    surrogate: Callable[..., Any] | None = None  # plain torch: forward equal to the formula's, autograd = the intended gradient
    order: int = 1  # 2: double backward is checked too

    def inputs(self, seed: int = 0) -> tuple:
        return tuple(self.make_inputs(seed))

    @property
    def callable(self) -> Callable[..., Any]:
        f = self.function
        return f.apply if isinstance(f, type) and issubclass(f, torch.autograd.Function) else f


# ---- seeded inputs ---------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def one(scale: float = 1.0, shape: tuple[int, ...] = SHAPE) -> Callable[[int], tuple]:
    return lambda seed: (_randn(_gen(seed), *shape, scale=scale),)


def linear_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), _randn(g, 8, 8, scale=0.5), _randn(g, 8)


def cross_entropy_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), torch.randint(0, 8, (4,), generator=g)


def embedding_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 5, 8), torch.tensor([0, 2, 2, 4, 2])  # row 2 picked three times


def dropout_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), torch.rand(4, 8, generator=g) > 0.3


def checkpoint_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), _randn(g, 8, 8, scale=0.3)


def layernorm_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), 1 + _randn(g, 8, scale=0.3), _randn(g, 8)


def distances_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), _randn(g, 3, 8)


def two(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), _randn(g, 4, 8)


def bias_inputs(seed: int) -> tuple:
    g = _gen(seed)
    return _randn(g, 4, 8), _randn(g, 8)


# ---- surrogates and references -------------------------------------------------------------------


def straight_through_round(x: Tensor) -> Tensor:
    return x + (x.round() - x).detach()


def hardtanh_sign(x: Tensor) -> Tensor:
    clipped = x.clamp(-1, 1)
    return clipped + (x.sign() - clipped).detach()


LAMBDA = 0.3


def reversal(x: Tensor) -> Tensor:
    return (1 + LAMBDA) * x.detach() - LAMBDA * x  # forward x, gradient −λ


def fast_sigmoid_spike(x: Tensor) -> Tensor:
    soft = x / (1 + fn.SpikeFastSigmoid.slope * x.abs())  # d/dx = 1/(1 + k|x|)²
    return soft + ((x > 0).to(x.dtype) - soft).detach()


def entmax_dim1(f):
    return lambda x: f.apply(x, 1)


# ---- the corpus ----------------------------------------------------------------------------------

CASES: tuple[Case, ...] = (
    # PyTorch's "Extending PyTorch" docs
    Case("linear_function", "PyTorch 'Extending PyTorch' docs' LinearFunction", fn.LinearFunction, linear_inputs, "pass", order=2),
    Case("linear_transposed_weight_grad", "a real bug: the docs' LinearFunction with grad_weight transposed (before its fix: linear_function)",
         fn.LinearTransposedWeightGrad, linear_inputs, "fail"),
    Case("mul_constant", "PyTorch 'Extending PyTorch' docs' MulConstant", lambda x: fn.MulConstant.apply(x, 2.5), one(), "pass", order=2),
    Case("exp_setup_context", "PyTorch docs' Exp in the setup_context style", fn.ExpSetupContext, one(), "pass", order=2),
    # several outputs, integer inputs and outputs, non-differentiable outputs
    Case("row_max_with_indices", "torch.max(dim) values + indices, indices marked non-differentiable", fn.RowMaxWithIndices, one(), "pass"),
    Case("topk3_int_indices", "torch.topk's scatter backward, int64 indices unmarked", fn.TopK3, one(), "pass"),
    Case("sort_setup_context", "torch.sort's (values, indices), setup_context marks the indices", fn.SortSetupContext, one(), "pass"),
    Case("cross_entropy_int_targets", "F.cross_entropy's fused backward, int64 targets as an input", fn.CrossEntropyIntTargets,
         cross_entropy_inputs, "pass", reference=lambda logits, target: F.cross_entropy(logits, target)),
    Case("embedding_index_add", "F.embedding's index_add backward, repeated indices", fn.EmbeddingLookup, embedding_inputs, "pass"),
    Case("embedding_overwrites_repeats", "a real bug: embedding backward by index assignment loses repeats (fixed: embedding_index_add)",
         fn.EmbeddingLookupOverwrites, embedding_inputs, "fail"),
    Case("dropout_with_mask", "torch's native_dropout (output, mask): a float output marked non-differentiable, a bool input",
         lambda x, keep: fn.DropoutWithMask.apply(x, keep, 0.3), dropout_inputs, "pass"),
    Case("sincos", "two differentiable outputs (sin, cos), as rotary embeddings use", fn.SinCos, one(), "pass", order=2),
    Case("sincos_first_grad_only", "a real bug: a two-output backward ignoring the second grad_output (fixed: sincos)",
         fn.SinCosFirstGradOnly, one(), "fail"),
    # @classmethod forward/backward, a positional parameter after the tensor
    Case("logsumexp_classmethod_dim", "entmax-style classmethod forward(cls, ctx, X, dim), applied as F.apply(x, 1)",
         lambda x: fn.LogSumExpDim.apply(x, 1), one(), "pass", order=2),
    Case("logsumexp_saves_intermediate", "a real bug: saving an intermediate breaks double backward (fixed: logsumexp_classmethod_dim)",
         lambda x: fn.LogSumExpDimSavesIntermediate.apply(x, 1), one(), "fail", order=2),
    Case("softmax_classmethod_dim1", "entmax-style classmethod softmax on a 3-D input, applied as F.apply(x, 1)",
         lambda x: fn.SoftmaxDim.apply(x, 1), one(shape=(2, 4, 4)), "pass", reference=lambda x: torch.softmax(x, 1)),
    Case("softmax_forward_ignores_dim", "a real bug: classmethod forward(ctx, X, dim) hard-codes dim=-1 (fixed: softmax_classmethod_dim1)",
         lambda x: fn.SoftmaxDimIgnored.apply(x, 1), one(shape=(2, 4, 4)), "fail"),
    Case("softmax_forward_ignores_dim_vs_reference", "the same bug, checked against the intended softmax(x, 1) as reference",
         lambda x: fn.SoftmaxDimIgnored.apply(x, 1), one(shape=(2, 4, 4)), "fail", reference=lambda x: torch.softmax(x, 1)),
    # @once_differentiable
    Case("softplus_once_differentiable", "torchvision-style @once_differentiable backward, checked to first order", fn.SoftplusOnce, one(), "pass"),
    Case("softplus_once_differentiable_order2", "the same, with double backward asked for: not twice differentiable, as declared",
         fn.SoftplusOnce, one(), "pass", order=2),
    # surrogate gradients
    Case("straight_through_round", "straight-through rounding in quantizers", fn.StraightThroughRound, one(2.0), "pass",
         surrogate=straight_through_round),
    Case("sign_hardtanh_ste", "BinaryNet's sign with the hardtanh straight-through estimator", fn.SignHardtanhSTE, one(1.5), "pass",
         surrogate=hardtanh_sign),
    Case("sign_ste_unclipped", "a real bug: BinaryNet's STE without the |x| <= 1 clip (fixed: sign_hardtanh_ste)", fn.SignSTEUnclipped,
         one(1.5), "fail", surrogate=hardtanh_sign),
    Case("gradient_reversal", "gradient reversal layer (Ganin & Lempitsky, DANN): backward −λ·g",
         lambda x: fn.GradientReversal.apply(x, LAMBDA), one(), "pass", surrogate=reversal),
    Case("gradient_reversal_no_lambda", "a real bug: a DANN reversal layer returning −g, λ ignored (fixed: gradient_reversal)",
         lambda x: fn.GradientReversalNoLambda.apply(x, LAMBDA), one(), "fail", surrogate=reversal),
    Case("spike_fast_sigmoid", "SuperSpike / snntorch fast-sigmoid surrogate for a Heaviside spike", fn.SpikeFastSigmoid, one(), "pass",
         surrogate=fast_sigmoid_spike),
    # nested apply and checkpointing
    Case("gaussian_nested_apply", "nested .apply inside forward (a composite op reusing a primitive Function)", fn.GaussianNested, one(), "pass"),
    Case("checkpoint_reentrant_style", "torch.utils.checkpoint reentrant: recompute in backward, autograd.grad inside", fn.CheckpointBlock,
         checkpoint_inputs, "pass", reference=fn.block),
    Case("checkpoint_drops_weight_grad", "a real bug: a hand-rolled checkpoint returning None for the weight (fixed: checkpoint_reentrant_style)",
         fn.CheckpointBlockDropsWeight, checkpoint_inputs, "fail"),
    Case("torch_checkpoint_non_reentrant", "torch.utils.checkpoint.checkpoint(use_reentrant=False) itself", fn.checkpoint_non_reentrant,
         checkpoint_inputs, "pass", order=2),
    # sparsemax / entmax
    Case("sparsemax", "the entmax package's sparsemax (classmethod, dim)", entmax_dim1(fn.Sparsemax), one(1.5), "pass"),
    Case("sparsemax_no_mean_term", "a real bug: sparsemax backward without the −mean over the support (fixed: sparsemax)",
         entmax_dim1(fn.SparsemaxNoMeanTerm), one(1.5), "fail"),
    Case("entmax15", "the entmax package's exact sort-based 1.5-entmax", entmax_dim1(fn.Entmax15), one(2.0), "pass"),
    # a wavelet-ish padded transform
    Case("dwt1d_periodic", "pytorch_wavelets' DWT with padding (db2, periodic), outputs (low, high)", fn.DWT1DPeriodic, one(), "pass"),
    Case("dwt1d_crops_padding", "a real bug: the padded transform's backward crops the padding instead of folding it back "
         "(fixed: dwt1d_periodic)", fn.DWT1DCropsPadding, one(), "fail"),
    # local response normalisation
    Case("cross_map_lrn", "torch.nn._functions CrossMapLRN2d", fn.CrossMapLRN, one(1.5, (1, 8, 2, 2)), "pass",
         reference=lambda x: F.local_response_norm(x, 3, alpha=0.5, beta=0.75, k=1.0)),
    Case("cross_map_lrn_no_cross_term", "a real bug: LRN backward without the normaliser's term (fixed: cross_map_lrn)",
         fn.CrossMapLRNNoCrossTerm, one(1.5, (1, 8, 2, 2)), "fail"),
    # softmax, logsumexp, layer norm by hand
    Case("softmax_by_hand", "hand-written softmax saving its output", fn.Softmax, one(), "pass", reference=lambda x: torch.softmax(x, 1),
         order=2),
    Case("softmax_batch_sum", "a real bug: softmax backward summing over the batch axis (fixed: softmax_by_hand)", fn.SoftmaxBatchSum, one(),
         "fail", reference=lambda x: torch.softmax(x, 1)),
    Case("logsumexp_by_hand", "hand-written stable logsumexp", fn.LogSumExp, one(), "pass", reference=lambda x: x.logsumexp(1), order=2),
    Case("logsumexp_no_grad_output", "a real bug: logsumexp backward missing the grad_output multiply (fixed: logsumexp_by_hand)",
         fn.LogSumExpNoGradOutput, one(), "fail"),
    Case("layernorm_by_hand", "hand-written layer norm (fused-kernel tutorials' backward, in torch ops)", fn.LayerNorm, layernorm_inputs,
         "pass", reference=lambda x, w, b: F.layer_norm(x, (8,), w, b, eps=1e-5), order=2),
    Case("layernorm_no_variance_term", "a real bug: layer norm backward treating σ as a constant (fixed: layernorm_by_hand)",
         fn.LayerNormNoVarianceTerm, layernorm_inputs, "fail"),
    # real bugs, before and after their fixes
    Case("tanh_setup_context", "hand-written tanh saving its output, setup_context style", fn.Tanh, one(), "pass", order=2),
    Case("tanh_no_grad_output", "a real bug: tanh backward missing the grad_output multiply (fixed: tanh_setup_context)", fn.TanhNoGradOutput,
         one(), "fail"),
    Case("swish_memory_efficient", "EfficientNet-PyTorch's MemoryEfficientSwish", fn.Swish, one(), "pass", reference=F.silu, order=2),
    Case("swish_missing_term", "a real bug: swish's product rule missing its σ(x) term (fixed: swish_memory_efficient)", fn.SwishMissingTerm,
         one(), "fail", reference=F.silu),
    Case("squared_distances", "prototypical networks' squared distances to prototypes", fn.SquaredDistances, distances_inputs, "pass",
         order=2),
    Case("squared_distances_half", "a real bug: squared distances missing the factor of 2 (fixed: squared_distances)",
         fn.SquaredDistancesHalf, distances_inputs, "fail"),
    Case("row_variance", "torch.var(dim=1, unbiased=False) by hand", fn.RowVariance, one(), "pass", order=2),
    Case("row_variance_wrong_mean_dim", "a real bug: backward reducing over the wrong dim (mean(0) for mean(1)) (fixed: row_variance)",
         fn.RowVarianceWrongMeanDim, one(), "fail"),
    Case("mul_add_needs_input_grad", "the docs' needs_input_grad pattern with None defaults", fn.MulAdd, two, "pass", order=2),
    Case("mul_add_unbound_grad", "a real bug: needs_input_grad branches without None defaults, unbound when one input needs no gradient "
         "(fixed: mul_add_needs_input_grad)", fn.MulAddUnbound, two, "fail"),
    Case("add_bias", "nn.Linear-style bias gradient summed over the batch", fn.AddBias, bias_inputs, "pass"),
    Case("add_bias_wrong_axis", "a real bug: the bias gradient summed over the wrong axis (fixed: add_bias)", fn.AddBiasWrongAxis,
         bias_inputs, "fail"),
    Case("exp_saved_output", "the docs' Exp, saved output used out of place", fn.ExpSaved, one(), "pass"),
    Case("exp_saved_edited_in_place", "a real bug: backward edits its saved tensor in place, y.mul_(g) (fixed: exp_saved_output)",
         fn.ExpSavedEditedInPlace, one(), "fail"),
    Case("exp_grad_output_in_place", "a real bug: backward edits grad_output in place, g.mul_(y) (fixed: exp_saved_output)",
         fn.ExpGradOutputInPlace, one(), "fail"),
    Case("logsigmoid", "hand-written log-sigmoid, derivative σ(−x)", fn.LogSigmoid, one(2.0), "pass", reference=F.logsigmoid, order=2),
    Case("logsigmoid_flipped", "a real bug: log-sigmoid backward using σ(x) for σ(−x) (fixed: logsigmoid)", fn.LogSigmoidFlipped, one(2.0),
         "fail"),
)

BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "case names must be unique"
