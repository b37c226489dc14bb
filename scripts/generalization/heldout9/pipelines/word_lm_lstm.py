"""word_language_model-style LSTM LM with manual SGD updates, on a synthetic Zipfian corpus."""
import argparse
import math
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description='PyTorch LSTM Language Model (synthetic corpus)')
parser.add_argument('--emsize', type=int, default=32)
parser.add_argument('--nhid', type=int, default=48)
parser.add_argument('--nlayers', type=int, default=2)
parser.add_argument('--lr', type=float, default=20)
parser.add_argument('--clip', type=float, default=0.25)
parser.add_argument('--steps', type=int, default=8, help='number of training batches')
parser.add_argument('--batch_size', type=int, default=8)
parser.add_argument('--bptt', type=int, default=8)
parser.add_argument('--dropout', type=float, default=0.2)
parser.add_argument('--tied', action='store_true')
parser.add_argument('--seed', type=int, default=1111)
parser.add_argument('--eval_every', type=int, default=4, help='evaluate + anneal lr every N batches')
parser.add_argument('--zero_grad_after', action='store_true',
                    help='clear grads after the update instead of before the forward')
parser.add_argument('--log-interval', type=int, default=2)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cpu")
ntokens = 50


def synthetic_corpus(n, seed):
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, ntokens + 1, dtype=torch.float)
    unigram = 1.0 / ranks
    # sticky bigram structure: each word prefers a small set of successors
    succ = torch.randint(0, ntokens, (ntokens, 3), generator=g)
    out = torch.empty(n, dtype=torch.long)
    out[0] = 0
    coin = torch.rand(n, generator=g)
    pick = torch.randint(0, 3, (n,), generator=g)
    uni = torch.multinomial(unigram, n, replacement=True, generator=g)
    for i in range(1, n):
        out[i] = succ[out[i - 1], pick[i]] if coin[i] < 0.6 else uni[i]
    return out


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


corpus_train = synthetic_corpus(4000, seed=1)
corpus_valid = synthetic_corpus(800, seed=2)
eval_batch_size = 10
train_data = batchify(corpus_train, args.batch_size)
val_data = batchify(corpus_valid, eval_batch_size)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)
criterion = nn.NLLLoss()


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, min(data_source.size(0) - 1, 10 * args.bptt), args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    n = min(data_source.size(0) - 1, 10 * args.bptt)
    return total_loss / n


lr = args.lr
best_val_loss = None
model.train()
total_loss = 0.
start_time = time.time()
hidden = model.init_hidden(args.batch_size)
for batch, i in enumerate(range(0, args.steps * args.bptt, args.bptt)):
    data, targets = get_batch(train_data, i)
    hidden = repackage_hidden(hidden)
    if not args.zero_grad_after:
        model.zero_grad()
    output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    loss.backward()

    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    if args.zero_grad_after:
        model.zero_grad()

    total_loss += loss.item()
    if batch % args.log_interval == 0 and batch > 0:
        cur_loss = total_loss / args.log_interval
        print(f'| {batch:5d} batches | lr {lr:02.2f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}')
        total_loss = 0

    if args.eval_every and (batch + 1) % args.eval_every == 0:
        val_loss = evaluate(val_data)
        model.train()
        print(f'| end of chunk {(batch + 1) // args.eval_every:3d} | valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}')
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0

val_loss = evaluate(val_data)
print('=' * 60)
print(f'| End of training | valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}')
