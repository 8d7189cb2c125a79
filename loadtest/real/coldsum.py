#!/usr/bin/env python3
"""Summarize coldstart.sh output: per build, the median sync and the ratio to the direct
syncs of the same files, and the per-round pairs (each build's sync against the direct sync
that ends its round): median and mean of the ratios and how many rounds kache won.

    python3 loadtest/real/coldsum.py OUT [OUT ...]
"""
import re
import statistics as st
import sys

LINE = re.compile(r"([^:]+): synced in ([\d.]+) s; CPU ms: (?:kache (\d+), )?apiserver (\d+)")


def main(files):
    syncs, cpu, pairs = {}, {}, {}
    for f in files:
        rnd = {}
        for line in open(f):
            m = LINE.match(line)
            if not m:
                continue
            who, secs = m[1], float(m[2])
            syncs.setdefault(who, []).append(secs)
            cpu.setdefault(who, []).append(int(m[4]))
            if who != "directly":
                rnd[who] = secs
                continue
            for b, s in rnd.items():
                pairs.setdefault(b, []).append(s / secs)
            rnd = {}
    direct = st.median(syncs["directly"])
    for who, v in syncs.items():
        med = st.median(v)
        line = f"{who}: {len(v)} syncs, median {med:.2f} s ({med / direct:.2f}x), apiserver CPU median {st.median(cpu[who]) / 1000:.2f} s"
        if who in pairs:
            p = pairs[who]
            won = sum(r < 1 for r in p)
            line += f"; paired: median {st.median(p):.3f}x, mean {st.mean(p):.3f}x, faster in {won} of {len(p)}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
