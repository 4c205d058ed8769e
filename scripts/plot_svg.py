#!/usr/bin/env python3
"""Minimal SVG line plots for model cards and benchmark docs (no plotting library needed).

Usage as a module: line_plot(path, title, xlabel, ylabel, series) where series is a list of
(name, [(x, y), ...]).
"""
import html

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]


def line_plot(path, title, xlabel, ylabel, series, width=720, height=400, log_y=False):
    import math
    pts = [p for _, s in series for p in s]
    if not pts:
        raise ValueError("nothing to plot")
    fy = (lambda v: math.log10(max(v, 1e-9))) if log_y else (lambda v: v)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(fy(p[1]) for p in pts), max(fy(p[1]) for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    L, R, T, B = 70, 160, 40, 50
    W, H = width - L - R, height - T - B

    def sx(x):
        return L + (x - x0) / (x1 - x0) * W

    def sy(y):
        return T + H - (fy(y) - y0) / (y1 - y0) * H

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
           f'<line x1="{L}" y1="{T + H}" x2="{L + W}" y2="{T + H}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + H}" stroke="black"/>',
           f'<text x="{L + W / 2}" y="{height - 10}" text-anchor="middle">{html.escape(xlabel)}</text>',
           f'<text x="18" y="{T + H / 2}" text-anchor="middle" transform="rotate(-90 18 {T + H / 2})">{html.escape(ylabel)}</text>']
    for i in range(5):
        xv = x0 + (x1 - x0) * i / 4
        yv = y0 + (y1 - y0) * i / 4
        ylab = 10 ** yv if log_y else yv
        out.append(f'<text x="{sx(xv)}" y="{T + H + 16}" text-anchor="middle">{xv:.4g}</text>')
        out.append(f'<text x="{L - 6}" y="{T + H - (yv - y0) / (y1 - y0) * H + 4}" text-anchor="end">{ylab:.3g}</text>')
        out.append(f'<line x1="{L}" y1="{T + H - i * H / 4}" x2="{L + W}" y2="{T + H - i * H / 4}" stroke="#eee"/>')
    for k, (name, s) in enumerate(series):
        c = COLORS[k % len(COLORS)]
        if len(s) > 1:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{d}"/>')
        for x, y in s if len(s) <= 40 else []:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{c}"/>')
        out.append(f'<rect x="{L + W + 15}" y="{T + 10 + 18 * k}" width="12" height="3" fill="{c}"/>')
        out.append(f'<text x="{L + W + 32}" y="{T + 15 + 18 * k}">{html.escape(name)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
