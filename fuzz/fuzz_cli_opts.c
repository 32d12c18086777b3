/* fuzz_cli_opts.c — the command lines of bin/m3-ref and bin/m3-gpu through
 * m3_cli_parse (ref/cli_opts.h): the input is split at newlines into at most
 * 64 arguments, parsed with every option group; an accepted set must hold
 * every range the parser promises, m3_cli_prompt_check must not crash, and
 * --chunks parses to sizes >= 1 summing to the prompt (16 tokens) or fails. */
#include "cli_opts.h"
#include "common.h"
#include "sampling.h"
#include "speculative.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = m3fuzz_strndup(data, size);
    if (!s)
        return 0;
    char *argv[64];
    int argc = 0;
    for (char *p = s; argc < 64;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    const unsigned all = 16383u, /* every option group */ masks[3] = {all, all & ~(unsigned)M3_CLI_BATCH, M3_CLI_CASE};
    for (int k = 0; k < 3; k++) {
        m3_cli_opts o;
        m3_err e;
        if (m3_cli_parse(argc, argv, masks[k], &o, &e) != 0 || o.help)
            continue;
        if (!o.model || o.n_src < 0 || o.n_src > M3_CLI_MAX_PROMPTS || o.n_images < 0 ||
            o.n_images > M3_CLI_MAX_IMAGES || o.max_new < 0 || o.max_new > INT32_MAX ||
            o.spec_k < 1 || o.spec_k > M3_SPEC_MAX_K || o.top_k < 0 || o.seed < 0 ||
            (o.have_top_p && !(o.top_p > 0.0f && o.top_p <= 1.0f)) ||
            (o.have_temp &&
             !(o.temperature >= M3_SAMPLE_MIN_TEMPERATURE && o.temperature <= 1e6f)) ||
            (o.have_fps && !(o.fps > 0.0f)) || (o.dump && !*o.dump) ||
            (o.dtype && strcmp(o.dtype, "fp32") && strcmp(o.dtype, "bf16")) ||
            (!(masks[k] & M3_CLI_BATCH) && o.n_src > 2) || (o.greedy_by_temp && (o.have_temp || !o.greedy)) ||
            (o.chunks && !*o.chunks))
            abort();
        for (int i = 0; i < o.n_src; i++)
            if (!o.src[i])
                abort();
        (void)m3_cli_prompt_check(&o, &e);
        if (o.chunks) { /* sizes against a prompt of 16 tokens: all >= 1, summing to 16 */
            int *c = NULL, n = 0;
            if (m3_cli_parse_chunks(o.chunks, 16, &c, &n, &e) == 0) {
                int sum = 0;
                for (int i = 0; i < n; i++) {
                    if (c[i] < 1)
                        abort();
                    sum += c[i];
                }
                if (sum != 16)
                    abort();
            } else if (c) {
                abort();
            }
            free(c);
        }
    }
    free(s);
    return 0;
}
