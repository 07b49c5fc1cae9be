#!/usr/bin/env python3
"""Markdown tables for docs/FIDELITY.md from the JSON that `tqserve eval quant|kl|niah --json` prints.

    python3 tools/fidelity_tables.py quant.json kl.json niah.json
Each argument is recognised by its content; missing ones are skipped.
"""
import json
import sys


def quant_table(j):
    out = ["| d | bits | MSE (paper's estimator) | MSE, norm-corrected | paper D_mse | 4^-b | IP error (MSE quantizer) | slope | IP error (Q_prod) | slope | paper D_prod |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in j["rows"]:
        out.append(f"| {r['d']} | {r['bits']} | {r['mse']:.5f} | {r['mse_norm_corrected']:.5f} | {r['paper_mse']} | "
                   f"{r['lower_bound']:.5f} | {r['ip_error']:.3e} | {r['ip_bias']:.3f} | {r['ip_error_prod']:.3e} | "
                   f"{r['ip_bias_prod']:.3f} | {r['paper_ip_prod']:.3e} |")
    return "\n".join(out)


def kl_table(j):
    out = [f"reference: {j['reference']} KV cache; {j['tokens']} scored positions in {j['windows']} windows of {j['ctx']} tokens "
           f"({j['text_tokens']} tokens of text)", "",
           "| mode | bits/element | KV bytes/token | KLD mean | KLD median | KLD p99 | top-1 | PPL | ΔPPL |",
           "|---|---|---|---|---|---|---|---|---|"]
    for m in j["modes"]:
        out.append(f"| {m['mode']} | {m['bits_per_element']:.2f} | {m['kv_bytes_per_token']} | {m['kld_mean']:.5f} | "
                   f"{m['kld_median']:.5f} | {m['kld_p99']:.5f} | {100 * m['top1']:.2f}% | {m['ppl']:.4f} | "
                   f"{m['ppl'] - m['ppl_ref']:+.4f} |")
    if j["modes"]:
        out.append(f"\nreference perplexity {j['modes'][0]['ppl_ref']:.4f}")
    return "\n".join(out)


def niah_table(j):
    ctxs = sorted({c["ctx"] for m in j["modes"] for c in m["cells"]})
    out = ["| mode | " + " | ".join(str(c) for c in ctxs) + " | accuracy |", "|---" * (len(ctxs) + 2) + "|"]
    for m in j["modes"]:
        cells = []
        for c in ctxs:
            row = [x for x in m["cells"] if x["ctx"] == c]
            cells.append(f"{sum(x['found'] for x in row)}/{len(row)}")
        out.append(f"| {m['mode']} | " + " | ".join(cells) + f" | {100 * m['accuracy']:.1f}% |")
    modes = {m["mode"]: {(c["ctx"], c["depth"]): c["found"] for c in m["cells"]} for m in j["modes"]}
    fp = next((k for k in modes if k in ("f16", "f32", "bf16")), None)
    if fp:
        for name, cells in modes.items():
            if name == fp:
                continue
            missed = [key for key, found in modes[fp].items() if found and not cells.get(key, False)]
            out.append(f"\n{name}: misses {len(missed)} of the needles {fp} finds" +
                       (": " + ", ".join(f"ctx {c} depth {d:.1f}" for c, d in missed) if missed else ""))
    return "\n".join(out)


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            j = json.load(f)
        if "rows" in j:
            print(quant_table(j))
        elif "reference" in j:
            print(kl_table(j))
        else:
            print(niah_table(j))
        print()


if __name__ == "__main__":
    main()
