#!/usr/bin/env python3
"""The headline table (markdown) and its plot (SVG, one bar per command: kache's time as a
fraction of going direct) from parity.py's JSON.

    python3 loadtest/real/headline_table.py headline.json --commit abc1234 --svg headline.svg > headline.md
"""
import argparse, json

p = argparse.ArgumentParser()
p.add_argument("json")
p.add_argument("--commit", default="unknown")
p.add_argument("--svg", default="")
a = p.parse_args()
d = json.load(open(a.json))
rows = d["results"]
print(f"Medians of {d['n']}, kache and direct alternating, commit {a.commit}; the pod read is "
      f"`{d.get('namespace')}/{d.get('pod')}`, on node `{d.get('node')}`, label `{d.get('selector')}`.\n")
static = any("static_median" in r for r in rows)
if static:
    print("| command | through kache | direct | kache / direct | static TLS, same bytes | kache / static |")
    print("|---|---|---|---|---|---|")
else:
    print("| command | through kache | direct | kache / direct |")
    print("|---|---|---|---|")
for r in rows:
    line = f"| {r['command']} | {r['kache_median']:.3f} s | {r['direct_median']:.3f} s | {r['ratio']:.2f}x |"
    if static:
        line += (f" {r['static_median']:.3f} s ({r['bytes'] / 1e6:.0f} MB) | {r['static_ratio']:.2f}x |" if "static_median" in r else " | |")
    print(line)
if static:
    print("\nStatic TLS: nginx serving, over TLS from memory-cached files, the bytes kache answered, read by the same client: "
          "what sending them costs at all.")
if a.svg:
    w, bar, left, top = 760, 18, 330, 30
    h = top + len(rows) * (bar + 6) + 40
    scale = (w - left - 60) / max(1.25, max(r["ratio"] for r in rows))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18">kache\'s time / going direct (1.0 = the same; commit {a.commit})</text>']
    for i, r in enumerate(rows):
        y = top + i * (bar + 6)
        width = r["ratio"] * scale
        color = "#2b7bb9" if r["ratio"] <= 1.1 else "#c0392b"
        out.append(f'<text x="{left - 6}" y="{y + bar - 5}" text-anchor="end">{r["command"]}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{width:.1f}" height="{bar}" fill="{color}"/>')
        out.append(f'<text x="{left + width + 4:.1f}" y="{y + bar - 5}">{r["ratio"]:.2f}x</text>')
    x1 = left + scale
    out.append(f'<line x1="{x1:.1f}" y1="{top - 4}" x2="{x1:.1f}" y2="{h - 30}" stroke="#555" stroke-dasharray="4 3"/>')
    out.append("</svg>")
    open(a.svg, "w").write("\n".join(out) + "\n")
