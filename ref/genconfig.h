/* genconfig.h — generation defaults from a checkpoint's generation_config.json.
 *
 * Spec: M3-SAMPLE-3 (sampling defaults: the file's do_sample, temperature,
 * top_p, top_k and eos_token_id when present; else temperature 1.0, top_p
 * 0.95, top_k 40 and config.json's eos). Used by bin/m3-ref and bin/m3-gpu
 * generate, so both read the file identically. The file is read whole with a
 * 1 MiB cap (M3_GENCONFIG_MAX_FILE).
 */
#ifndef M3_GENCONFIG_H
#define M3_GENCONFIG_H

#include "err.h"

#define M3_GENCONFIG_MAX_FILE (1u << 20)
#define M3_GENCONFIG_MAX_EOS 16

typedef struct m3_gen_defaults {
    int greedy; /* do_sample false, or temperature 0 */
    float temperature, top_p;
    int top_k;
    int n_eos;
    int eos[M3_GENCONFIG_MAX_EOS];
} m3_gen_defaults;

/* The built-in defaults (sampling, T 1.0, top-p 0.95, top-k 40) with eos as
 * the only end-of-sequence id (config.json's eos_token_id). */
m3_gen_defaults m3_gen_defaults_builtin(int eos);

/* Override g from DIR/generation_config.json when that file exists (absent:
 * 0, g unchanged). -1 on an unreadable or malformed file, naming the file
 * and the field; g may then be partly updated. */
int m3_gen_config_load(const char *dir, m3_gen_defaults *g, m3_err *e);

/* Apply the command-line flags over g (M3-SAMPLE-3 precedence: flags, then
 * the file, then the built-in defaults). A NULL pointer means the flag was
 * not given. --greedy forces greedy; a file's do_sample false / temperature
 * 0 makes the default greedy only when no sampling flag is given. */
void m3_gen_apply_flags(m3_gen_defaults *g, int greedy_flag, const float *temperature,
                        const float *top_p, const int *top_k);

#endif
