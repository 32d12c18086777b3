/* gen_jpeg_seeds.c — write tiny JPEG seeds for fuzz_jpeg with libjpeg:
 * grey, RGB 4:4:4, RGB 4:2:0, progressive, CMYK (Adobe marker).
 * usage: gen_jpeg_seeds OUTDIR   (run by tools/gen_fuzz_seeds.py) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static int write_one(const char *dir, const char *name, J_COLOR_SPACE cs, int comps, int h0,
                     int v0, int progressive, int quality)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = 17;
    c.image_height = 9;
    c.input_components = comps;
    c.in_color_space = cs;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    c.comp_info[0].h_samp_factor = h0;
    c.comp_info[0].v_samp_factor = v0;
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[17 * 4];
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < 17; x++)
            for (int k = 0; k < comps; k++)
                row[x * comps + k] = (unsigned char)((x * 15 + (int)c.next_scanline * 27 + k * 60) & 255);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_jpeg_seeds OUTDIR\n");
        return 2;
    }
    const char *d = argv[1];
    if (write_one(d, "gray.jpg", JCS_GRAYSCALE, 1, 1, 1, 0, 75) ||
        write_one(d, "rgb444.jpg", JCS_RGB, 3, 1, 1, 0, 80) ||
        write_one(d, "rgb420.jpg", JCS_RGB, 3, 2, 2, 0, 50) ||
        write_one(d, "progressive.jpg", JCS_RGB, 3, 2, 1, 1, 70) ||
        write_one(d, "cmyk.jpg", JCS_CMYK, 4, 1, 1, 0, 60))
        return 1;
    return 0;
}
