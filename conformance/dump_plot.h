/* dump_plot.h — pictures of one activation dump (spec/dump.md), drawn by
 * `m3-conform plot`: the MSA block selections of every sparse layer and the
 * MoE routing of every MoE layer, as PNG files (canvas.h). */
#ifndef M3_DUMP_PLOT_H
#define M3_DUMP_PLOT_H

#include "conform.h"

/* Heat maps of layers.{i}.attn.block_indices (int [G, T, K], -1 padded), one
 * panel per sparse layer: query row t down, key block b across, the colour
 * the share of the G index heads that selected b for t; blocks after t's own
 * block (the largest id in its row) are blank. title heads the picture.
 * -1 with a message on bad input (no such tensor, wrong shape, bad ids). */
int cf_plot_selection(const cf_tset *dump, const char *title, const char *png_path, m3_err *e);

/* Histograms of layers.{i}.moe.topk_index (int [T, k]), one panel per MoE
 * layer: how many of the T x k picks went to each expert, the uniform load
 * T k / E marked (E from moe.scores [T, E], else the largest id + 1). */
int cf_plot_routing(const cf_tset *dump, const char *title, const char *png_path, m3_err *e);

#endif
