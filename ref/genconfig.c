/* genconfig.c — generation_config.json reader (M3-SAMPLE-3). */
#include "genconfig.h"
#include "sampling.h"
#include "fileio.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

m3_gen_defaults m3_gen_defaults_builtin(int eos)
{
    m3_gen_defaults g = {0};
    g.temperature = 1.0f;
    g.top_p = 0.95f;
    g.top_k = 40;
    g.n_eos = 1;
    g.eos[0] = eos;
    return g;
}

/* An integer-valued JSON number in [0, 2^31). */
static int is_small_int(const cJSON *x)
{
    return cJSON_IsNumber(x) && x->valuedouble >= 0.0 && x->valuedouble < 2147483648.0 &&
           x->valuedouble == floor(x->valuedouble);
}

static const char *apply(const cJSON *j, m3_gen_defaults *g)
{
    const cJSON *it;
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "do_sample"))) {
        if (!cJSON_IsBool(it))
            return "do_sample must be true or false";
        if (cJSON_IsFalse(it))
            g->greedy = 1;
    }
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "temperature"))) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0) || it->valuedouble > 1e6)
            return "temperature must be a number in [0, 1e6]";
        if (it->valuedouble > 0.0 && it->valuedouble < M3_SAMPLE_MIN_TEMPERATURE)
            return "temperature must be 0 (greedy) or at least 1e-4 (smaller ones overflow "
                   "logit / temperature)";
        if (it->valuedouble == 0.0)
            g->greedy = 1;
        else
            g->temperature = (float)it->valuedouble;
    }
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "top_p"))) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0.0) || it->valuedouble > 1.0)
            return "top_p must be a number in (0, 1]";
        g->top_p = (float)it->valuedouble;
    }
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "top_k"))) {
        if (!is_small_int(it))
            return "top_k must be an integer in [0, 2^31)";
        g->top_k = (int)it->valuedouble;
    }
    if ((it = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id")) && !cJSON_IsNull(it)) {
        const char *bad = "eos_token_id must be an integer id or a list of at most 16 of them";
        g->n_eos = 0;
        if (is_small_int(it)) {
            g->eos[g->n_eos++] = (int)it->valuedouble;
        } else if (cJSON_IsArray(it)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, it)
            {
                if (!is_small_int(x) || g->n_eos == M3_GENCONFIG_MAX_EOS)
                    return bad;
                g->eos[g->n_eos++] = (int)x->valuedouble;
            }
        } else {
            return bad;
        }
    }
    return NULL;
}

int m3_gen_config_load(const char *dir, m3_gen_defaults *g, m3_err *e)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/generation_config.json", dir) >= (int)sizeof path)
        return m3_fail(e, "%s: model directory path too long", dir);
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return 0;
    char *text = NULL;
    size_t len = 0;
    if (m3_read_file(path, M3_GENCONFIG_MAX_FILE, &text, &len, e) != 0)
        return -1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return m3_fail(e, "%s: not a well-formed JSON object", path);
    }
    const char *bad = apply(j, g);
    cJSON_Delete(j);
    if (bad)
        return m3_fail(e, "%s: %s", path, bad);
    return 0;
}

void m3_gen_apply_flags(m3_gen_defaults *g, int greedy_flag, const float *temperature,
                        const float *top_p, const int *top_k)
{
    g->greedy = greedy_flag || (g->greedy && !temperature && !top_p && !top_k);
    if (temperature)
        g->temperature = *temperature;
    if (top_p)
        g->top_p = *top_p;
    if (top_k)
        g->top_k = *top_k;
}
