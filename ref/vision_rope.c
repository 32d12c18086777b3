/* vision_rope.c — 3D rotary tables for the vision tower.
 *
 * Spec: M3-VIS-ROPE-1..3. Frequencies and angles follow the text RoPE's
 * recipe (M3-ROPE-1/2): inv_freq in double rounded to fp32, one fp32
 * multiply for the angle, cos/sin in double rounded to fp32.
 */
#include "vision_rope.h"

#include <math.h>
#include <stddef.h>

int m3_vision_rope_dim(int head_dim)
{
    return 3 * 2 * ((head_dim / 3) / 2);
}

void m3_vision_rope_table(float *cos_out, float *sin_out, int t, int h, int w, int head_dim,
                          double theta)
{
    int axis = 2 * ((head_dim / 3) / 2); /* 26 */
    int nf = axis / 2;                   /* 13 frequencies per axis */
    int coord[3] = {t, h, w};
    for (int a = 0; a < 3; a++) {
        for (int i = 0; i < nf; i++) {
            float inv = (float)(1.0 / pow(theta, (double)(2 * i) / (double)axis));
            float angle = (float)coord[a] * inv;
            cos_out[a * nf + i] = (float)cos((double)angle);
            sin_out[a * nf + i] = (float)sin((double)angle);
        }
    }
}

void m3_vision_coords(int32_t *coords, int gt, int gh, int gw, int merge)
{
    size_t n = 0;
    for (int t = 0; t < gt; t++)
        for (int br = 0; br < gh / merge; br++)
            for (int bc = 0; bc < gw / merge; bc++)
                for (int mh = 0; mh < merge; mh++)
                    for (int mw = 0; mw < merge; mw++) {
                        coords[3 * n + 0] = t;
                        coords[3 * n + 1] = br * merge + mh;
                        coords[3 * n + 2] = bc * merge + mw;
                        n++;
                    }
}
