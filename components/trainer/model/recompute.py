"""Activation recomputation (`training.recompute`): trade a second forward pass for memory.

Without it, the backward pass reads every activation the forward pass made: per block the
normalised inputs, Q/K/V, the [heads, length, length] attention scores and weights, the MLP's
[length, mlp_dim] inner activations. With `block`, the forward pass keeps only each block's input;
the backward pass runs the block's forward again, from that input, just before it needs the
block's activations, so only one block's activations are alive at a time.

`recompute_in_backward` is `tf.recompute_grad`: a custom gradient that reruns the function under
its own tape in the backward pass. Its recomputation depends on the incoming gradient through a
data dependency (not a control dependency, which XLA ignores), so neither Grappler nor XLA can
schedule it in the forward pass.

Only deterministic functions can be recomputed: dropout draws a new mask on every call, so the
recomputed activations would not be those of the forward pass and the gradients would be wrong;
`options.check_recompute` refuses that combination.
"""
from typing import Callable

import tensorflow as tf


def recompute_in_backward(function: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[tf.Tensor], tf.Tensor]:
    """`function` (one tensor in, one out; the variables it reads get gradients too) with its
    intermediate activations recomputed in the backward pass instead of kept from the forward pass."""
    return tf.recompute_grad(function)
