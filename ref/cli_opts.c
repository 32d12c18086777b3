/* cli_opts.c — see cli_opts.h. */
#include "cli_opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "speculative.h"
#include "tokens.h"

int m3_cli_parse_ll(const char *s, long long lo, long long hi, long long *out)
{
    if (!s)
        return -1;
    const char *d = s[0] == '-' && lo < 0 ? s + 1 : s;
    if (*d < '0' || *d > '9')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int m3_cli_parse_float(const char *s, float *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end != '\0' || end == s || !isfinite(v) || fabs(v) > 3.0e38)
        return -1;
    *out = (float)v;
    return 0;
}

int m3_cli_parse_tokens(const char *s, int32_t **out, int *n, m3_err *e)
{
    size_t cnt = 0;
    *out = NULL;
    *n = 0;
    if (m3_parse_token_list(s, strlen(s), "token list", out, &cnt, e) != 0)
        return -1;
    *n = (int)cnt; /* cnt <= M3_TOKENS_MAX < INT_MAX */
    return 0;
}

/* One prompt source (--tokens or --prompt) into o's list. */
static int add_source(m3_cli_opts *o, const char *flag, const char *val, int text, unsigned allow,
                      m3_err *e)
{
    if (!(allow & M3_CLI_BATCH) && (text ? o->prompt : o->tokens))
        return m3_fail(e, "option %s given twice (one prompt per run)", flag);
    if (o->n_src == M3_CLI_MAX_PROMPTS)
        return m3_fail(e, "at most %d --tokens / --prompt (prompts of a batch); one more: '%s'",
                       M3_CLI_MAX_PROMPTS, val);
    o->src[o->n_src] = val;
    o->src_text[o->n_src++] = text;
    if (text)
        o->prompt = val;
    else
        o->tokens = val;
    return 0;
}

int m3_cli_parse(int argc, char *const *argv, unsigned allow, m3_cli_opts *o, m3_err *e)
{
    memset(o, 0, sizeof *o);
    o->max_new = 32;
    o->spec_k = 3;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
#define TAKES_VALUE()                                                                              \
    do {                                                                                           \
        if (i + 1 >= argc)                                                                         \
            return m3_fail(e, "option %s needs a value", a);                                       \
        val = argv[++i];                                                                           \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            return 0;
        } else if (!strcmp(a, "--model")) {
            TAKES_VALUE();
            o->model = val;
        } else if (!strcmp(a, "--lenient-config")) {
            o->lenient = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--strict") && (allow & M3_CLI_STRICT)) {
            o->strict = 1;
        } else if (!strcmp(a, "--case") && (allow & M3_CLI_CASE)) {
            TAKES_VALUE();
            o->case_dir = val;
        } else if (!strcmp(a, "--tokens") && (allow & M3_CLI_TOKENS)) {
            TAKES_VALUE();
            if (add_source(o, a, val, 0, allow, e))
                return -1;
        } else if (!strcmp(a, "--prompt") && (allow & M3_CLI_PROMPT)) {
            TAKES_VALUE();
            if (add_source(o, a, val, 1, allow, e))
                return -1;
        } else if (!strcmp(a, "--teacher-forced") && (allow & M3_CLI_TEACHER)) {
            TAKES_VALUE();
            o->teacher = val;
        } else if (!strcmp(a, "--dump") && (allow & M3_CLI_DUMP)) {
            TAKES_VALUE();
            if (!*val)
                return m3_fail(e, "--dump: empty output path");
            o->dump = val;
        } else if (!strcmp(a, "--dtype") && (allow & M3_CLI_DTYPE)) {
            TAKES_VALUE();
            if (strcmp(val, "fp32") && strcmp(val, "bf16"))
                return m3_fail(e, "--dtype must be fp32 or bf16 (got '%s')", val);
            o->dtype = val;
        } else if (!strcmp(a, "--max-new-tokens") && (allow & (M3_CLI_GEN | M3_CLI_CONTINUE))) {
            TAKES_VALUE();
            if (m3_cli_parse_ll(val, 0, INT_MAX, &o->max_new))
                return m3_fail(e, "--max-new-tokens needs an integer >= 0 (got '%s')", val);
            o->have_max_new = 1;
        } else if (!strcmp(a, "--chunks") && (allow & M3_CLI_CHUNKS)) {
            TAKES_VALUE();
            if (!*val)
                return m3_fail(e, "--chunks: empty list");
            o->chunks = val;
        } else if (!strcmp(a, "--stream-weights") && (allow & M3_CLI_STREAM)) {
            o->stream_weights = 1;
        } else if (!strcmp(a, "--exact-kernels") && (allow & M3_CLI_EXACT)) {
            o->exact_kernels = 1;
        } else if (!strcmp(a, "--greedy") && (allow & M3_CLI_GEN)) {
            o->greedy = 1;
            o->greedy_by_temp = 0;
        } else if (!strcmp(a, "--temperature") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            /* 0 is greedy (M3-SAMPLE-1); tiny positive values would overflow logit / T */
            if (m3_cli_parse_float(val, &o->temperature) || o->temperature < 0.0f ||
                (o->temperature > 0.0f && o->temperature < M3_SAMPLE_MIN_TEMPERATURE) ||
                o->temperature > 1e6f)
                return m3_fail(e, "--temperature needs 0 (greedy) or a number in [1e-4, 1e6] "
                                  "(got '%s')", val);
            /* the last --temperature wins: 0 makes greedy what an earlier value sampled */
            if (o->temperature == 0.0f) {
                o->have_temp = 0;
                o->greedy_by_temp = !o->greedy || o->greedy_by_temp;
                o->greedy = 1;
            } else {
                o->have_temp = 1;
                if (o->greedy_by_temp)
                    o->greedy = o->greedy_by_temp = 0;
            }
        } else if (!strcmp(a, "--top-p") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            if (m3_cli_parse_float(val, &o->top_p) || !(o->top_p > 0.0f) || o->top_p > 1.0f)
                return m3_fail(e, "--top-p needs a number in (0, 1] (got '%s')", val);
            o->have_top_p = 1;
        } else if (!strcmp(a, "--top-k") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            if (m3_cli_parse_ll(val, 0, INT_MAX, &o->top_k))
                return m3_fail(e, "--top-k needs an integer >= 0 (got '%s')", val);
            o->have_top_k = 1;
        } else if (!strcmp(a, "--seed") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            if (m3_cli_parse_ll(val, 0, LLONG_MAX, &o->seed))
                return m3_fail(e, "--seed needs an integer >= 0 (got '%s')", val);
            o->have_seed = 1;
        } else if (!strcmp(a, "--draft") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            o->draft = val;
        } else if (!strcmp(a, "--spec-tokens") && (allow & M3_CLI_GEN)) {
            TAKES_VALUE();
            if (m3_cli_parse_ll(val, 1, M3_SPEC_MAX_K, &o->spec_k))
                return m3_fail(e, "--spec-tokens needs an integer in [1, %d] (got '%s')",
                               M3_SPEC_MAX_K, val);
        } else if (!strcmp(a, "--print-ids") && (allow & M3_CLI_GEN)) {
            o->print_ids = 1;
        } else if (!strcmp(a, "--image") && (allow & M3_CLI_VISION)) {
            TAKES_VALUE();
            if (o->n_images == M3_CLI_MAX_IMAGES)
                return m3_fail(e, "at most %d --image options (got more at '%s')",
                               M3_CLI_MAX_IMAGES, val);
            o->images[o->n_images++] = val;
        } else if (!strcmp(a, "--video") && (allow & M3_CLI_VISION)) {
            TAKES_VALUE();
            if (!*val)
                return m3_fail(e, "--video: empty frame list");
            o->video = val;
        } else if (!strcmp(a, "--fps") && (allow & M3_CLI_VISION)) {
            TAKES_VALUE();
            if (m3_cli_parse_float(val, &o->fps) || !(o->fps > 0.0f))
                return m3_fail(e, "--fps needs a number > 0 (got '%s')", val);
            o->have_fps = 1;
        } else if (!strcmp(a, "--pixels") && (allow & M3_CLI_VISION)) {
            TAKES_VALUE();
            o->pixels = val;
        } else if (!strcmp(a, "--vision-joint") && (allow & M3_CLI_VISION)) {
            o->vision_joint = 1;
        } else if (!strcmp(a, "--chat") && (allow & M3_CLI_PROMPT)) {
            o->chat = 1;
        } else if (!strcmp(a, "--thinking") && (allow & M3_CLI_PROMPT)) {
            TAKES_VALUE();
            o->thinking = val; /* checked by m3_prompt_check */
        } else if (!strcmp(a, "--system") && (allow & M3_CLI_PROMPT)) {
            TAKES_VALUE();
            o->system = val;
        } else if (!strcmp(a, "--conversation") && (allow & M3_CLI_CONVERSATION)) {
            TAKES_VALUE();
            o->conversation = val;
        } else {
            return m3_fail(e, "unknown option or argument '%s'", a);
        }
#undef TAKES_VALUE
    }
    if (!o->model && o->case_dir)
        o->model = o->case_dir;
    if (!o->model)
        return m3_fail(e, "%s is required", allow & M3_CLI_CASE ? "--model DIR (or --case DIR)"
                                                                : "--model DIR");
    return 0;
}

int m3_cli_parse_chunks(const char *s, int T, int **out, int *n, m3_err *e)
{
    int32_t *v = NULL;
    int k = 0;
    *out = NULL;
    *n = 0;
    if (m3_cli_parse_tokens(s, &v, &k, e) != 0)
        return m3_fail_prefix(e, "--chunks");
    long long sum = 0;
    for (int i = 0; i < k; i++) {
        if (v[i] < 1) {
            const int bad = (int)v[i];
            free(v);
            return m3_fail(e, "--chunks: chunk %d has %d tokens (every chunk needs at least 1)",
                           i, bad);
        }
        sum += v[i];
    }
    if (sum != T) {
        free(v);
        return m3_fail(e, "--chunks sum to %lld tokens, but the prompt has %d", sum, T);
    }
    int *c = malloc((size_t)k * sizeof *c);
    if (!c) {
        free(v);
        return m3_fail(e, "--chunks: out of memory");
    }
    for (int i = 0; i < k; i++)
        c[i] = (int)v[i];
    free(v);
    *out = c;
    *n = k;
    return 0;
}

m3_prompt_opts m3_cli_prompt_opts(const m3_cli_opts *o)
{
    m3_prompt_opts po;
    memset(&po, 0, sizeof po);
    po.have_text = o->prompt != NULL;
    po.chat = o->chat;
    po.system = o->system;
    po.thinking = o->thinking;
    po.conversation = o->conversation;
    po.n_images = o->n_images;
    po.video = o->video;
    po.have_fps = o->have_fps;
    po.pixels = o->pixels;
    po.joint = o->vision_joint;
    return po;
}

int m3_cli_prompt_check(const m3_cli_opts *o, m3_err *e)
{
    const m3_prompt_opts po = m3_cli_prompt_opts(o);
    return m3_prompt_check(&po, e);
}

int m3_cli_vision_requested(const m3_cli_opts *o)
{
    return o->n_images > 0 || o->video || o->pixels;
}

int m3_cli_bf16(const m3_cli_opts *o)
{
    return o->dtype && !strcmp(o->dtype, "bf16");
}
