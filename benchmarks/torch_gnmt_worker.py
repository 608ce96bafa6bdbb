"""The MLPerf reference's GNMT in PyTorch, one training step timed on
request (run by benchmarks/gnmt_step.py in its own venv: `make
torch_venv`).

Built as mlcommons/training's v0.7 `rnn_translator/pytorch/seq2seq/models`
builds it, on `torch.nn.LSTM`: an encoder of a bidirectional layer then
three layers, residual from the third; a decoder whose attention layer is
one LSTM over every step followed by normalized Bahdanau attention over
the encoder outputs for all steps at once (the reference's
RecurrentAttention: no input feeding, unlike Google's TF model and ours,
whose attention layer takes the previous step's context and so runs step
by step), then three layers on [h, context], residual from the second; a
linear classifier; dropout 0.2; label-smoothed (0.1) cross-entropy summed;
Adam with gradients clipped to norm 5. Uniform +-0.1 initialisation.
Inputs: the same shapes as ours (every sentence `--length` long, no
padding), seeded random ids.
Protocol: prints `ready`, then for each `run` line on stdin times `--steps`
steps and prints the seconds.
"""

import argparse

import torch
from torch import nn
import torch.nn.functional as F

import worker_protocol  # A sibling module: this runs as a script.


class Attention(nn.Module):
  """Normalized Bahdanau attention (the reference's BahdanauAttention with
  normalize=True)."""

  def __init__(self, units):
    super().__init__()
    self.query = nn.Linear(units, units, bias=False)
    self.key = nn.Linear(units, units, bias=False)
    self.v = nn.Parameter(torch.empty(units).uniform_(-0.1, 0.1))
    self.g = nn.Parameter(torch.tensor(1.0 / units ** 0.5))
    self.b = nn.Parameter(torch.zeros(units))

  def forward(self, queries, keys):
    """queries [batch, t, u], keys [batch, s, u] -> context [batch, t, u]."""
    q, k = self.query(queries), self.key(keys)
    v = self.g * self.v / self.v.norm()
    score = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1) + self.b) @ v
    return torch.softmax(score, -1) @ keys


class GNMT(nn.Module):

  def __init__(self, vocab, units, dropout=0.2):
    super().__init__()
    self.source_embedding = nn.Embedding(vocab, units)
    self.target_embedding = nn.Embedding(vocab, units)
    self.encoder = nn.ModuleList(
        [nn.LSTM(units, units, batch_first=True, bidirectional=True),
         nn.LSTM(2 * units, units, batch_first=True),
         nn.LSTM(units, units, batch_first=True),
         nn.LSTM(units, units, batch_first=True)])
    self.attention_lstm = nn.LSTM(units, units, batch_first=True)
    self.attention = Attention(units)
    self.decoder = nn.ModuleList(
        [nn.LSTM(2 * units, units, batch_first=True) for _ in range(3)])
    self.classifier = nn.Linear(units, vocab)
    self.drop = nn.Dropout(dropout)
    for p in self.parameters():
      if p.dim() > 0 and p is not self.attention.b:
        nn.init.uniform_(p, -0.1, 0.1)

  def forward(self, source, target_input):
    x = self.drop(self.source_embedding(source))
    for i, lstm in enumerate(self.encoder):
      below = x
      x, _ = lstm(self.drop(x) if i > 0 else x)
      if i > 1:
        x = x + below
    encoded = x
    y, _ = self.attention_lstm(self.drop(self.target_embedding(target_input)))
    context = self.attention(y, encoded)
    for i, lstm in enumerate(self.decoder):
      below = y
      y, _ = lstm(self.drop(torch.cat([y, context], -1)))
      if i > 0:
        y = y + below
    return self.classifier(y)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--batch', type=int, default=64)
  parser.add_argument('--length', type=int, default=24)
  parser.add_argument('--units', type=int, default=256)
  parser.add_argument('--vocab', type=int, default=8192)
  parser.add_argument('--steps', type=int, default=1)
  parser.add_argument('--threads', type=int, default=0)
  args = parser.parse_args()
  if args.threads:
    torch.set_num_threads(args.threads)
  torch.manual_seed(0)
  model = GNMT(args.vocab, args.units)
  model.train()
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  shape = (args.batch, args.length)
  source = torch.randint(3, args.vocab, shape)
  target = torch.randint(3, args.vocab, shape)
  target_input = torch.cat([torch.zeros_like(target[:, :1]), target[:, :-1]],
                           1)

  def step():
    logits = model(source, target_input)
    loss = F.cross_entropy(logits.reshape(-1, args.vocab), target.reshape(-1),
                           label_smoothing=0.1, reduction='sum')
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()

  step()  # Warm-up.
  worker_protocol.serve(lambda: [step() for _ in range(args.steps)])


if __name__ == '__main__':
  main()
