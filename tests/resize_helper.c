/* resize_helper.c — stdin/stdout driver of m3_resize_bicubic_u8 for the
 * device-machine comparison with torchvision (tools/vis_device_check.py).
 *
 * Input: one line "sh sw dh dw nc" then sh*sw*nc bytes; output: dh*dw*nc
 * bytes. Built standalone: cc -std=c11 -Iref tests/resize_helper.c
 * ref/preprocess.c ref/err.c -lm (needs no libpng/libjpeg/cJSON).
 */
#include <stdio.h>
#include <stdlib.h>

#include "preprocess.h"

int main(void)
{
    int sh, sw, dh, dw, nc;
    if (scanf("%d %d %d %d %d", &sh, &sw, &dh, &dw, &nc) != 5 || getchar() != '\n')
        return 2;
    if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || nc <= 0 || sh > 20000 || sw > 20000 ||
        dh > 20000 || dw > 20000 || nc > 4)
        return 2;
    size_t ni = (size_t)sh * sw * nc, no = (size_t)dh * dw * nc;
    unsigned char *in = malloc(ni), *out = malloc(no);
    if (!in || !out || fread(in, 1, ni, stdin) != ni)
        return 3;
    m3_err e;
    if (m3_resize_bicubic_u8(out, dh, dw, in, sh, sw, nc, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 4;
    }
    fwrite(out, 1, no, stdout);
    free(in);
    free(out);
    return 0;
}
