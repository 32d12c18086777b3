/* gen_config.h — generation defaults for bin/m3-gpu generate, read exactly as
 * bin/m3-ref generate reads them (ref/cli/m3-ref.c load_generation_config):
 * DIR/generation_config.json (do_sample, temperature, top_p, top_k,
 * eos_token_id as a number or a list of at most 16), else the built-in
 * defaults temperature 1.0, top_p 0.95, top_k 40 and config.json's eos.
 *
 * Spec: M3-SAMPLE-3 (defaults). Header-only (static functions); the caller
 * links cJSON.
 */
#ifndef M3_GPU_GEN_CONFIG_H
#define M3_GPU_GEN_CONFIG_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <cJSON.h>

typedef struct m3g_gen_defaults {
    int greedy;
    float temperature, top_p;
    int top_k;
    int n_eos;
    int eos[16];
} m3g_gen_defaults;

/* Fill g from DIR/generation_config.json when present (g holds the built-in
 * defaults and config.json's eos on entry). 0 ok (absent is ok), -1 on a
 * malformed file with the reason in why. */
static int m3g_load_generation_config(const char *dir, m3g_gen_defaults *g, char *why,
                                      size_t whylen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    char *text = NULL;
    if (len < 0 || len > (1L << 20) || fseek(f, 0, SEEK_SET) != 0 ||
        !(text = (char *)malloc((size_t)len + 1)) || fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        fclose(f);
        snprintf(why, whylen, "%s: cannot read (or larger than 1 MiB)", path);
        return -1;
    }
    fclose(f);
    cJSON *j = cJSON_ParseWithLength(text, (size_t)len);
    free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(why, whylen, "%s: not a well-formed JSON object", path);
        return -1;
    }
    const char *bad = NULL;
    const cJSON *it;
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "do_sample"))) {
        if (!cJSON_IsBool(it))
            bad = "do_sample must be true or false";
        else if (cJSON_IsFalse(it))
            g->greedy = 1;
    }
    if (!bad && (it = cJSON_GetObjectItemCaseSensitive(j, "temperature"))) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0) || it->valuedouble > 1e6)
            bad = "temperature must be a number >= 0";
        else if (it->valuedouble == 0.0)
            g->greedy = 1;
        else
            g->temperature = (float)it->valuedouble;
    }
    if (!bad && (it = cJSON_GetObjectItemCaseSensitive(j, "top_p"))) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0.0) || it->valuedouble > 1.0)
            bad = "top_p must be a number in (0, 1]";
        else
            g->top_p = (float)it->valuedouble;
    }
    if (!bad && (it = cJSON_GetObjectItemCaseSensitive(j, "top_k"))) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 2147483647.0 ||
            it->valuedouble != floor(it->valuedouble))
            bad = "top_k must be an integer >= 0";
        else
            g->top_k = (int)it->valuedouble;
    }
    if (!bad && (it = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id")) && !cJSON_IsNull(it)) {
        g->n_eos = 0;
        if (cJSON_IsNumber(it)) {
            g->eos[g->n_eos++] = (int)it->valuedouble;
        } else if (cJSON_IsArray(it)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, it)
            {
                if (!cJSON_IsNumber(x) || g->n_eos == 16) {
                    bad = "eos_token_id must be an integer or a list of at most 16";
                    break;
                }
                g->eos[g->n_eos++] = (int)x->valuedouble;
            }
        } else {
            bad = "eos_token_id must be an integer or a list of at most 16";
        }
    }
    cJSON_Delete(j);
    if (bad) {
        snprintf(why, whylen, "%s: %s", path, bad);
        return -1;
    }
    return 0;
}

#endif
