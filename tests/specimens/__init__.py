"""The tests' specimens: custom autograd Functions (and families of them) used as test subjects,
each defined once. A collection that needs another's Function imports it; nothing here is a test.

- ``zoo``: one wrong backward per class of bug the diagnosis names (grad_output ignored, reduced or
  rolled, transposed, swapped, sign, factor, missing term, region, reduction dim, not finite, double
  backward) and correct ones with kinks (``Square``, ``Abs``, ``RowMax``...), each with a reference
  and inputs; our own, written one per class to hold the verdict against gradcheck's slow mode.
- ``grad_output``: backwards right for the loss's own upstream (ones) and wrong for any other (a
  softmax that ignores, averages or rolls grad_output; a straight-through clamp off its pattern):
  what a card must never show as right; our own, after bugs filed against fused softmax kernels.
- ``conditions``: Functions right in plain use and wrong under one condition (one input requiring a
  gradient, grad_output's or the inputs' layout, aliasing, an empty batch or a batch of one, ties),
  and controls; re-created from kinds of bug seen in public code (a wavelet package, CUDA
  extensions, fused kernels, pooling layers), each named in a comment.
- ``parity``: Functions and ``torch.library`` custom ops right in eager and wrong or raising under one
  way of running them (torch.compile, jvp, vmap, torch.func, double backward), and controls;
  re-created from bugs reported against PyTorch and kernel libraries.
- ``contracts``: Functions that each break one rule of the autograd.Function contract (``BROKEN``),
  and ones written as people ship them that keep it (``KEPT``: classmethods, out= in backward, state
  on ctx, torch's reentrant checkpoint); after PyTorch's "Extending PyTorch" rules and torch's own
  Functions (CrossMapLRN2d, CheckpointFunction).
- ``shipped``: three Functions as they ship, for the tests of issue #24 (a forward that ignores its
  dim, a gradient summed to its input's shape, a padded filter wrong at its boundary); patterns seen
  in public code (wavelet transforms).
- ``toys``: small families for the engine's tests: a broken square with a known worst element, a
  dense Jacobian, a forward that reaches further than its reference; our own.
- ``corpus``: about sixty Functions of the kinds people really write, each bug beside its fix
  (``functions``), and their cases: seeded inputs, the author's intent, a surrogate where the
  backward is meant to differ (``cases``); each with a one-line comment naming where the idea came
  from (PyTorch's docs, entmax, torchvision, BinaryNet, DANN, SuperSpike, pytorch_wavelets,
  EfficientNet...). ``tests/corpus/test_corpus.py`` holds Gradient Lab against gradcheck's oracle on it.
- ``modules/``: users' plugin modules, loaded by file path (``GRADIENT_LAB_FUNCTIONS``,
  ``gradient-lab check``, ``plugins.load``) or put on ``sys.path`` by the tests; each is written as a
  user writes one, standing alone (so a few repeat an idea of the collections above on purpose):
  broken or raising modules for the command line and the sidebar, and the precision, NaN and
  determinism Functions re-created from the kinds of report users file.
"""
