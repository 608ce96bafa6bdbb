"""GNMT's LSTM layer with its gradient written out: Google's `build_rnn`
loop over `lstm_cell` (models/gnmt/model.lstm_step's cell), forward and
backward each one while loop.

TensorFlow's automatic gradient of a time loop runs, at every step, the
cell's gradient op by op, including the step's share of each weight's
gradient (h_t-1^T dgates_t, then an add into the running sum) and the
bias's (a reduction over the batch); and a loop that is not differentiated
by hand stacks every intermediate the gradient needs in a TensorList a
step at a time. Written out:
- the forward loop keeps what the backward needs as the step's
  coefficients (the gates' derivatives, off the step's chain, so a second
  core computes them beside it);
- the backward loop carries only the recurrence: dh = dh_out + dgates W^T,
  dc = dc f_next + dh o (1 - tanh^2 c), dgates = [dc, dc, dc, dh] x the
  step's coefficients;
- the kernels' gradients are one matmul each over all steps after it, the
  bias's one sum; the input's is computed a step at a time inside the
  backward loop, off its chain (on a CPU the second core takes it beside
  the chain: the layer measured 5-15% faster at 128 units so than with
  the input's gradient after the loop or by TensorFlow).
The input's share of the gates (x W_x + b, their `lstm_cell_gate`'s) is
computed for all steps at once before the loop, as theirs.

The values are those of automatic differentiation of the same cell (a
test holds them to it and to a NumPy version of Google's loop); the order
of the sums differs, so the last bits may.

`unrolled=True` writes both loops out step by step over the static time
instead (the same bodies; every step runs, so the first `longest` steps
hold the same values and the later ones are not zero): the time-to-train
model's count (tools/predictor/cost.py COUNTED_PROGRAM), since XLA counts a
while loop's body once. In the GNMT every step past the batch's longest
sequence is masked before it reaches an earlier step or the loss, so the
loss and gradients are the same (a test holds them).
"""

import tensorflow as tf


def _size(t, axis):
  return t.shape[axis] if t.shape[axis] is not None else tf.shape(t)[axis]


def _stack(array, longest, time):
  """The array's elements as one tensor: those the loop wrote (the steps
  below `longest`), then zeros to `time`."""
  if array.element_shape.is_fully_defined():
    return array.stack()  # Elements never written stack as zeros.
  written = array.gather(tf.range(longest))  # Shapes known when run only.
  return tf.pad(written, [[0, time - longest], [0, 0], [0, 0]])


def _loop(body, carry, longest, time, unrolled: bool):
  """`body` while its step counter is below `longest` (at most `time`
  times), or `time` times written out (`unrolled`: time must be static)."""
  if not unrolled:
    return tf.while_loop(lambda i, *_: i < longest, body, carry,
                         maximum_iterations=time, parallel_iterations=32)
  if not isinstance(time, int):
    raise ValueError('An unrolled LSTM needs a static time dimension.')
  for _ in range(time):
    carry = body(*carry)
  return carry


def lstm_layer(inputs, input_kernel, kernel, bias, max_length, padding=None,
               reverse: bool = False, unrolled: bool = False):
  """An LSTM over time from a zero state, as their `build_rnn` drives it.

  Args:
    inputs: [time, batch, features], the layer's input.
    input_kernel: [features, 4 units], W_x; kernel: [units, 4 units], W_h;
      bias: [4 units]. Gates (i, j, f, o), forget bias 0 (theirs).
    max_length: the batch's longest sequence: steps from it on are not
      run (their outputs are zero), and a backward layer starts at
      max_length - 1.
    padding: [time, batch], 1 inside each sequence (their backward encoder
      layer passes it: each sequence's backward state starts at its own
      last token; the state is zeroed where it is 0); None: no mask.
    reverse: run from the last step to the first.
    unrolled: every step of the static time written out (the module
      docstring): for counting a step's cost.

  Returns:
    h of every step, [time, batch, units].
  """
  dtype = inputs.dtype
  longest = inputs.shape[0] if unrolled else tf.cast(max_length, tf.int32)
  features, units = input_kernel.shape[0], kernel.shape[0]
  mask = None if padding is None else tf.expand_dims(
      tf.cast(padding, dtype), 2)

  @tf.custom_gradient
  def run(x, input_kernel, kernel, bias):
    gates_x = tf.nn.bias_add(tf.einsum('tbf,fd->tbd', x, input_kernel), bias)
    h, saved = _forward(gates_x, kernel, mask, longest, reverse, unrolled)

    def gradients(dh):
      dgates, dx = _backward(dh, input_kernel, kernel, h, saved, mask,
                             longest, reverse, unrolled)
      dgates = tf.reshape(dgates, [-1, 4 * units])
      h_before = tf.reshape(_before(h, reverse), [-1, units])
      return (dx,
              tf.matmul(tf.reshape(x, [-1, features]), dgates,
                        transpose_a=True),
              tf.matmul(h_before, dgates, transpose_a=True),
              tf.reduce_sum(dgates, 0))

    return h, gradients

  return run(inputs, *(tf.cast(w, dtype)
                       for w in (input_kernel, kernel, bias)))


def _before(h, reverse):
  """Each step's h before it in the loop's order (zero before the first)."""
  first = tf.zeros_like(h[:1])
  return tf.concat([h[1:], first], 0) if reverse else tf.concat(
      [first, h[:-1]], 0)


def _step_order(longest, reverse):
  """The loop's i-th step: t = i, or longest - 1 - i backward."""
  return (lambda i: longest - 1 - i) if reverse else (lambda i: i)


def _forward(x, wh, mask, longest, reverse, unrolled):
  """The forward loop over x = inputs W_x + b, [time, batch, 4 units].

  Returns:
    (h [time, batch, units], zero from `longest` on; the backward's
    coefficients: k [time, batch, 4 units] (dgates = [dc, dc, dc, dh] k),
    e [time, batch, units] (dh's share of dc), f [time, batch, units]
    (the forget gates: dc's carry to the step before)).
  """
  time, batch = _size(x, 0), _size(x, 1)
  units = wh.shape[0]
  dtype = x.dtype
  order = _step_order(longest, reverse)

  def array(width):
    return tf.TensorArray(dtype, size=time, element_shape=[x.shape[1], width])

  def body(i, h, c, hs, ks, es, fs):
    t = order(i)
    gates = tf.matmul(h, wh) + x[t]
    gi, gj, gf, go = tf.split(gates, 4, axis=1)
    ig, jg, fg, og = tf.sigmoid(gi), tf.tanh(gj), tf.sigmoid(gf), tf.sigmoid(go)
    c_prev = c
    c = c * fg + ig * jg
    tc = tf.tanh(c)
    h = tc * og
    if mask is not None:
      m = mask[t]
      c, h, og = c * m, h * m, og * m
    k = tf.concat([jg * ig * (1 - ig), ig * (1 - jg * jg),
                   c_prev * fg * (1 - fg), tc * og * (1 - og)], 1)
    return (i + 1, h, c, hs.write(t, h), ks.write(t, k),
            es.write(t, og * (1 - tc * tc)), fs.write(t, fg))

  zeros = tf.zeros([batch, units], dtype)
  _, _, _, *arrays = _loop(
      body, (0, zeros, zeros, array(units), array(4 * units), array(units),
             array(units)), longest, time, unrolled)
  h, *saved = (_stack(a, longest, time) for a in arrays)
  return h, saved


def _backward(dh_out, wx, wh, h, saved, mask, longest, reverse, unrolled):
  """The backward loop: the gates' gradients [time, batch, 4 units] and the
  input's [time, batch, features] (a step at a time: off the step's
  chain, on a CPU it overlaps it)."""
  k, e, f = saved
  time, batch = _size(h, 0), _size(h, 1)
  units = wh.shape[0]
  dtype = h.dtype
  order = _step_order(longest, reverse)
  wh_t, wx_t = tf.transpose(wh), tf.transpose(wx)

  def body(i, dgates, dc, f_after, dgs, dxs):
    # The forward loop's last step first; dgates, dc and f_after are those
    # of the step after t in the forward loop's order (zero at the first).
    t = order(longest - 1 - i)
    dh = dh_out[t] + tf.matmul(dgates, wh_t)
    carry = f_after if mask is None else f_after * mask[t]
    dc = dc * carry + dh * e[t]
    dgates = tf.concat([dc, dc, dc, dh], 1) * k[t]
    return (i + 1, dgates, dc, f[t], dgs.write(t, dgates),
            dxs.write(t, tf.matmul(dgates, wx_t)))

  def array(width):
    return tf.TensorArray(dtype, size=time, element_shape=[h.shape[1], width])

  zeros = tf.zeros([batch, units], dtype)
  _, _, _, _, dgs, dxs = _loop(
      body, (0, tf.zeros([batch, 4 * units], dtype), zeros, zeros,
             array(4 * units), array(wx.shape[0])), longest, time, unrolled)
  return _stack(dgs, longest, time), _stack(dxs, longest, time)
