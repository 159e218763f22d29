"""Times two or more ways of doing one op in the same processes: batches
of each, interleaved in a shuffled order per round, so that all of them
see the same minutes of a machine whose speed drifts (used by
mpi_side_by_side.py and torch_layers.py)."""
import random
import statistics
import time


def interleaved(ways, rounds, batch, barrier, slowest, seed):
    """Runs every callable of the dict `ways` `batch` times (a warm-up),
    then `rounds` rounds of one batch of each in a shuffled order, each
    batch after `barrier()`. Returns {name: [seconds per op, by round]},
    each time passed through `slowest` (the max over ranks)."""
    for op in ways.values():
        for _ in range(batch):
            op()
    times = {k: [] for k in ways}
    order = list(ways)
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for k in order:
            op = ways[k]
            barrier()
            t0 = time.perf_counter()
            for _ in range(batch):
                op()
            times[k].append(slowest((time.perf_counter() - t0) / batch))
    return times


def ratio_stats(num, den):
    """Median, first and third quartile of the per-round ratios num/den."""
    ratios = [a / b for a, b in zip(num, den)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q1, q3
