"""Training sequences: corpus text, with synthetic long-range retrieval mixed in so that retrieval
(induction) heads form — the pass-key case of docs/quality-bench.md and key-value recall.
Every sequence is exactly `length` tokens; the caller's random.Random makes it deterministic.
"""

NEEDLE = "The pass key is {k}. Remember it. {k} is the pass key.\n"
QUESTION = "\nWhat is the pass key? The pass key is"
KV_FACT = "The value of {name} is {v}.\n"
KV_NAMES = ("apple river stone cloud tiger maple amber cedar delta ember flint grove harbor ivory jasper "
            "kettle lemon meadow nickel orchid pepper quartz raven saddle timber umber velvet willow yarrow "
            "zephyr anchor beacon copper dune falcon garnet hazel indigo juniper kernel lantern marble "
            "nectar onyx pebble quill ribbon sable thistle").split()


class TaskMaker:
    def __init__(self, enc, stream):
        self.enc = enc
        self.stream = stream  # the training split as one token list, documents separated by EOT
        self.eot = enc.special("<|endoftext|>")
        self.random_copy_share = 0.0  # share of copy spans made of random tokens
        self.repeat_alphabet = 16  # repeat(): how many distinct token ids one sequence draws from

    def text(self, rng, n):
        start = rng.randrange(0, len(self.stream) - n - 1)
        return self.stream[start:start + n]

    def plain(self, rng, length):
        return self.text(rng, length)

    def passkey(self, rng, length):
        key = str(rng.randrange(10000, 100000))
        needle = self.enc.encode(NEEDLE.format(k=key))
        tail = self.enc.encode(QUESTION) + self.enc.encode(" " + key + ".\n")
        # The case fills a random share of the sequence; text from elsewhere (after an EOT) before it.
        case_len = rng.randrange(min(length, 96), length + 1)
        filler = self.text(rng, case_len - len(needle) - len(tail))
        at = int(len(filler) * rng.uniform(0.05, 0.95))
        case = filler[:at] + needle + filler[at:] + tail
        head = self.text(rng, length - len(case) - 1) + [self.eot] if len(case) < length else []
        return (head + case)[:length]

    def key_values(self, rng, length):
        names = rng.sample(KV_NAMES, rng.randrange(2, 9))
        facts = {n: str(rng.randrange(10000, 100000)) for n in names}
        queries = rng.sample(names, len(names))
        query_tokens = []
        for n in queries:
            query_tokens += self.enc.encode(KV_FACT.format(name=n, v=facts[n]))
        fact_tokens = [self.enc.encode(KV_FACT.format(name=n, v=facts[n])) for n in names]
        budget = length - len(query_tokens) - sum(map(len, fact_tokens))
        filler = self.text(rng, max(budget, 0))
        cuts = sorted(rng.randrange(0, len(filler) + 1) for _ in names)
        seq, prev = [], 0
        for cut, fact in zip(cuts, fact_tokens):
            seq += filler[prev:cut] + fact
            prev = cut
        seq += filler[prev:] + query_tokens
        return (seq + self.text(rng, length))[:length]

    def copy(self, rng, length, random_tokens=None):
        """A span of text, some other text, then the span again: every token of the repeat is a
        retrieval of the token after its earlier occurrence (what induction heads do)."""
        span = rng.randrange(16, max(17, length // 3))
        gap = rng.randrange(0, max(1, length - 2 * span))
        # Some spans may be random tokens (stage 3): no n-gram statistics help there, only the copy.
        # Stages without them draw nothing extra, so their sequences stay as they were trained.
        if random_tokens is None:
            random_tokens = self.random_copy_share > 0 and rng.random() < self.random_copy_share
        if random_tokens:
            first = [rng.randrange(self.eot) for _ in range(span)]
        else:
            first = self.text(rng, span)
        seq = self.text(rng, length - 2 * span - gap) + first + self.text(rng, gap) + first
        return seq[:length]

    def random_copy(self, rng, length):
        """Random tokens only, with a repeat that only retrieval predicts: either the sequence
        repeats itself with a random period, or one random span reappears later. Stage 4 starts
        with these alone (docs/trained-model.md: copies inside text did not make induction form)."""
        toks = [rng.randrange(self.eot) for _ in range(length)]
        if rng.random() < 0.5:
            period = rng.randrange(4, max(5, length // 3))
            for i in range(period, length):
                toks[i] = toks[i - period]
        else:
            span = rng.randrange(6, max(7, length // 4))
            first = rng.randrange(0, length - 2 * span + 1)
            again = rng.randrange(first + span, length - span + 1)
            toks[again:again + span] = toks[first:first + span]
        return toks

    def repeat(self, rng, length):
        """A random pattern of 8 ... length/2 tokens repeated to the end: every token after the first
        period is predicted only by finding the same context earlier — at a distance that changes
        from sequence to sequence, so no positional head can do it, only induction. Each sequence
        draws its pattern from `repeat_alphabet` ids chosen at random from the whole vocabulary, so
        the seeded induction circuit (circuits.py) is exercised on any token, not on a few."""
        period = rng.randrange(8, max(9, length // 2 + 1))
        ids = rng.sample(range(self.eot), min(self.repeat_alphabet, self.eot))
        pattern = [rng.choice(ids) for _ in range(period)]
        return (pattern * (length // period + 1))[:length]

    def sample(self, rng, length, mix):
        """mix: shares of (plain, pass-key, key-value[, copy[, random copy[, repeat]]]); the rest of 1
        goes to the last."""
        r = rng.random()
        makers = [self.plain, self.passkey, self.key_values, self.copy, self.random_copy, self.repeat][:len(mix)]
        for share, make in zip(mix, makers):
            if r < share:
                return make(rng, length)
            r -= share
        return makers[-1](rng, length)
