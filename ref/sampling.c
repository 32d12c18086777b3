/* sampling.c — choosing the next token from logits.
 *
 * Spec: M3-SAMPLE-1 (greedy = argmax, lowest index on ties), M3-SAMPLE-2
 * (z = logit / temperature in fp32; top-k over z ordered by z descending,
 * index ascending; softmax over the kept z with the max subtracted; top-p:
 * keep the smallest prefix of that order whose cumulative probability is
 * >= top_p, at least one token; renormalise; draw u = m3_sampler_uniform and
 * return the first kept token whose cumulative probability exceeds u;
 * xoshiro256** seeded by four splitmix64 outputs of the seed).
 * Defaults (M3-SAMPLE-3) are chosen by the caller.
 */
#include "sampling.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** next output. */
static uint64_t next_u64(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

int m3_sampler_init(m3_sampler *sp, int V, int greedy, float temperature, int top_k,
                    float top_p, uint64_t seed)
{
    sp->greedy = greedy;
    sp->temperature = temperature;
    sp->top_k = top_k;
    sp->top_p = top_p;
    sp->vocab = V;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        sp->s[i] = splitmix64(&x);
    sp->probs = NULL;
    sp->order = NULL;
    if (V <= 0)
        return -1;
    sp->probs = malloc((size_t)V * sizeof(float));
    sp->order = malloc((size_t)V * sizeof(int32_t));
    if (!sp->probs || !sp->order) {
        m3_sampler_free(sp);
        return -1;
    }
    return 0;
}

void m3_sampler_free(m3_sampler *sp)
{
    free(sp->probs);
    free(sp->order);
    sp->probs = NULL;
    sp->order = NULL;
}

double m3_sampler_uniform(m3_sampler *sp)
{
    return (double)(next_u64(sp->s) >> 11) * 0x1.0p-53; /* 53 random bits */
}

int32_t m3_argmax(const float *logits, int V)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

int m3_top_ids(const float *logits, int V, int k, int32_t *out)
{
    const int n = k < V ? k : V;
    for (int j = 0; j < n; j++) {
        int32_t best = -1;
        for (int32_t v = 0; v < V; v++) {
            int used = 0;
            for (int q = 0; q < j; q++)
                used |= out[q] == v;
            if (!used && (best < 0 || logits[v] > logits[best]))
                best = v;
        }
        out[j] = best;
    }
    return n < 0 ? 0 : n;
}

/* 1 iff token a ranks before token b: larger z, then lower index. */
static int ranks_before(const float *z, int32_t a, int32_t b)
{
    return z[a] > z[b] || (z[a] == z[b] && a < b);
}

/* Heap sort of ord [n] into rank order (best first) by z. */
static void sift_down(int32_t *ord, int start, int n, const float *z)
{
    int root = start;
    for (;;) {
        int child = 2 * root + 1;
        if (child >= n)
            return;
        /* a min-heap in rank terms: the worst-ranked element at the root */
        if (child + 1 < n && ranks_before(z, ord[child], ord[child + 1]))
            child++;
        if (!ranks_before(z, ord[root], ord[child]))
            return;
        int32_t t = ord[root];
        ord[root] = ord[child];
        ord[child] = t;
        root = child;
    }
}

static void sort_by_rank(int32_t *ord, int n, const float *z)
{
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_down(ord, i, n, z);
    for (int end = n - 1; end > 0; end--) {
        int32_t t = ord[0];
        ord[0] = ord[end];
        ord[end] = t;
        sift_down(ord, 0, end, z);
    }
}

/* ord [k] := the k best-ranked tokens of z [V], best first (insertion). */
static void top_k_by_rank(int32_t *ord, int k, const float *z, int V)
{
    int n = 0;
    for (int32_t i = 0; i < V; i++) {
        if (n == k && !ranks_before(z, i, ord[k - 1]))
            continue;
        int p = n < k ? n++ : k - 1;
        for (; p > 0 && ranks_before(z, i, ord[p - 1]); p--)
            ord[p] = ord[p - 1];
        ord[p] = i;
    }
}

int m3_sampler_dist(const m3_sampler *sp, const float *logits, int V, float *probs, int32_t *ord)
{
    if (sp->greedy || !(sp->temperature >= M3_SAMPLE_MIN_TEMPERATURE)) {
        ord[0] = m3_argmax(logits, V);
        probs[ord[0]] = 1.0f;
        return 1;
    }

    float *z = probs; /* [V] scaled logits, then kept probabilities */
    for (int i = 0; i < V; i++)
        z[i] = logits[i] / sp->temperature;

    int n; /* number of kept candidates, ord[0..n) best first */
    if (sp->top_k > 0 && sp->top_k < V) {
        n = sp->top_k;
        top_k_by_rank(ord, n, z, V);
    } else {
        n = V;
        for (int i = 0; i < V; i++)
            ord[i] = i;
        sort_by_rank(ord, n, z);
    }

    /* softmax over the kept (in rank order) */
    const float mx = z[ord[0]];
    float sum = 0.0f;
    for (int r = 0; r < n; r++) {
        float e = expf(z[ord[r]] - mx);
        z[ord[r]] = e;
        sum += e;
    }
    for (int r = 0; r < n; r++)
        z[ord[r]] /= sum;

    /* top-p: smallest prefix with cumulative probability >= top_p */
    if (sp->top_p < 1.0f) {
        float cum = 0.0f;
        int keep = n;
        for (int r = 0; r < n; r++) {
            cum += z[ord[r]];
            if (cum >= sp->top_p) {
                keep = r + 1;
                break;
            }
        }
        n = keep;
    }

    /* renormalise the kept */
    float kept = 0.0f;
    for (int r = 0; r < n; r++)
        kept += z[ord[r]];
    for (int r = 0; r < n; r++)
        z[ord[r]] /= kept;
    return n;
}

int32_t m3_sample(m3_sampler *sp, const float *logits)
{
    if (sp->greedy || !(sp->temperature >= M3_SAMPLE_MIN_TEMPERATURE))
        return m3_argmax(logits, sp->vocab); /* no draw: the stream is untouched */
    int n = m3_sampler_dist(sp, logits, sp->vocab, sp->probs, sp->order);
    double u = m3_sampler_uniform(sp);
    double cum = 0.0;
    for (int r = 0; r < n; r++) {
        cum += (double)sp->probs[sp->order[r]];
        if (u < cum)
            return sp->order[r];
    }
    return sp->order[n - 1];
}
