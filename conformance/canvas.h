/* canvas.h — an RGB raster for the kit's pictures: filled and framed boxes,
 * 5x7 bitmap text, a colour ramp, saved as PNG with libpng. Used by
 * report.c (the conformance heat map) and dump_plot.c (a dump's MSA block
 * selections and MoE routing). */
#ifndef M3_CANVAS_H
#define M3_CANVAS_H

#include "err.h"

/* w x h pixels, RGB, row-major; owned by whoever allocated px. */
typedef struct cf_canvas {
    int w, h;
    unsigned char *px;
} cf_canvas;

/* Set pixel (x, y) to rgb; outside the canvas nothing happens. */
void cf_put(cf_canvas *c, int x, int y, const unsigned char rgb[3]);
/* Fill the w x h box at (x0, y0) (clipped to the canvas). */
void cf_fill(cf_canvas *c, int x0, int y0, int w, int h, const unsigned char rgb[3]);
/* Draw the outline of the w x h box at (x0, y0), t pixels thick. */
void cf_frame(cf_canvas *c, int x0, int y0, int w, int h, int t, const unsigned char rgb[3]);
/* Draw s at (x, y) (top-left) in the 5x7 font (lower case drawn as upper case,
 * unknown characters as blanks), each font pixel scale x scale; returns the end x. */
int cf_text(cf_canvas *c, int x, int y, const char *s, int scale, const unsigned char rgb[3]);
/* t in [0, 1] (clamped; NaN as 0) to a dark-purple..blue..green..yellow ramp. */
void cf_viridis(double t, unsigned char out[3]);
/* Write c to path as an 8-bit RGB PNG; -1 with a message naming path on error. */
int cf_save_png(const char *path, const cf_canvas *c, m3_err *e);

#endif
