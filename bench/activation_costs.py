"""Cost of one read-path layer pair (all three kinds) and one natural-return layer at a given
shape, on random factors and activations (README / docs/costs.md "Activation stage").

    OMP_NUM_THREADS=1 python bench/activation_costs.py --shape 3584 28 4 128 --tokens 2048
"""

import argparse
import resource
import time

import numpy as np

from headgeom.methods.natural_return import layer_return
from headgeom.methods.read_paths import layer_pair_terms, reader_rows, writer_terms
from headgeom.core.factors import LayerFactors, gqa_map


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs=4, type=int, default=[3584, 28, 4, 128], metavar=("D", "H", "G", "d"))
    ap.add_argument("--tokens", type=int, default=2048)
    a = ap.parse_args()
    D, H, G, d = a.shape
    rng = np.random.default_rng(0)

    def layer():
        return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                            W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                            kv_group=gqa_map(H, G), norm_gain=1 + 0.1 * rng.standard_normal(D), norm_type="rmsnorm")

    fw, fr = layer(), layer()
    z = rng.standard_normal((a.tokens, H, d)).astype(np.float32)
    x = rng.standard_normal((a.tokens, D)).astype(np.float32)
    t = time.perf_counter()
    pt = layer_pair_terms(writer_terms(fw, z), fr, x, 1e-6)  # as read_paths_job: shared by the kinds
    for kind in "QKV":
        reader_rows(pt, kind)
    t_rp = time.perf_counter() - t
    t = time.perf_counter()
    layer_return(fw, z)
    t_nr = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"shape D={D} H={H} G={G} d={d}, {a.tokens} tokens: read paths {t_rp:.2f} s per layer pair (Q+K+V), "
          f"natural return {t_nr:.2f} s per layer, peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
