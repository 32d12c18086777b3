/* vision_rope.h — the released vision tower's 3D rotary embedding.
 *
 * Spec: M3-VIS-ROPE-1 (head_dim 80: per-axis width 2*((80/3)/2) = 26, i.e.
 * 13 frequencies inv_freq_i = 1/theta^(2i/26), theta 1e4, the same ladder
 * for T, H and W), M3-VIS-ROPE-2 (angles [t*f | h*f | w*f] = 39 values;
 * rotate-half over the first 78 dims, pairs (j, j+39); dims 78..79 pass
 * through), M3-VIS-ROPE-3 (coordinates follow the 2x2-merge patch order,
 * t restarting at 0 in every attention segment), Decision 1 (3D, never the
 * transformers 5.17.0 axial-2D variant). Tables are fp32 in both modes.
 */
#ifndef M3_VISION_ROPE_H
#define M3_VISION_ROPE_H

#include <stdint.h>

/* Rotated dims of a vision head: 3 * 2 * ((head_dim / 3) / 2) (78 for 80). */
int m3_vision_rope_dim(int head_dim);
/* cos/sin [rope_dim/2] for one patch at grid coordinate (t, h, w). */
void m3_vision_rope_table(float *cos_out, float *sin_out, int t, int h, int w, int head_dim,
                          double theta);
/* Grid coordinates of the patches of one segment of grid (gt, gh, gw), in
 * the merge order (t, merge row, merge col, mh, mw); coords [gt*gh*gw, 3]. */
void m3_vision_coords(int32_t *coords, int gt, int gh, int gw, int merge);

#endif
