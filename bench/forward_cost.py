"""Cost of the activation stage's forward pass at a 7B shape on CPU, per layer (docs/costs.md).

A 7B model's float32 weights (28 GB) do not fit a 24 GB machine, so the whole forward pass cannot
run here. This builds transformers' own Qwen2 decoder (random weights, no download, no remote code)
at Qwen2.5-7B's layer shape with 1 and with 2 layers, runs one forward pass over the tokens in
float32, and reports the difference (the cost of one decoder layer: attention, MLP, norms) and
the peak RSS. The embedding lookup is negligible; the LM head is not run by the activation stage
(hooks read the residual and the per-head outputs).

    python bench/forward_cost.py --tokens 2048 --threads 2
"""

import argparse
import resource
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch
    from transformers import Qwen2Config, Qwen2Model

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (1, a.tokens))
    seconds = {}
    for n_layers in (1, 2):
        cfg = Qwen2Config(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                          num_key_value_heads=4, num_hidden_layers=n_layers, vocab_size=1000,
                          max_position_embeddings=max(4096, a.tokens))
        model = Qwen2Model(cfg).eval()
        with torch.no_grad():
            model(ids[:, :16])  # warm-up
            t = time.perf_counter()
            model(ids)
            seconds[n_layers] = time.perf_counter() - t
        params = sum(p.numel() for p in model.layers[0].parameters())
        del model
    per_layer = seconds[2] - seconds[1]
    flops = 2 * params * a.tokens
    print(f"tokens {a.tokens}, threads {a.threads}: forward 1 layer {seconds[1]:.1f} s, 2 layers {seconds[2]:.1f} s; "
          f"one decoder layer {per_layer:.1f} s ({params / 1e6:.0f} M params, {flops / 1e12:.2f} TFLOP of weight "
          f"products: {flops / per_layer / 1e9:.0f} GFLOP/s); x 28 layers = {28 * per_layer / 60:.1f} min; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB "
          f"(a whole 7B forward holds 28 GB of float32 weights)")


if __name__ == "__main__":
    main()
