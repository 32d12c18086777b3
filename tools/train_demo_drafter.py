#!/usr/bin/env python3
"""train_demo_drafter.py — train the Eagle3 drafter of the m3 demo model
(models/demo-drafter) to imitate the demo model's next-token distribution.

Runs on a machine with a GPU, torch, transformers >= 5.17 (minimax_m3_vl),
tokenizers and safetensors (the m3 device machine). Never needed by m3 itself.

    python3 tools/train_demo_drafter.py --data .demo-data/kjv.txt --model models/demo \
            --out OUTDIR [--max-seconds 150] [--seed 4321]

What it does:
 1. encodes the KJV text with models/demo/tokenizer.json exactly as
    tools/train_demo.py did (same chunking, same 1 % validation tail);
 2. loads models/demo into transformers' MiniMaxM3SparseForConditionalGeneration
    (tools/adapters/hf_dump.py, fp32, eager, TF32 off) and, for each batch of
    text windows, records under no_grad the three Eagle3 taps (forward
    pre-hooks: the residual stream ENTERING layers taps = (min(2,L-1), L/2,
    max(L-3,0)) = (2, 3, 3) for L = 6, M3-EAGLE-TAP-1) and the target's
    next-token distribution;
 3. trains a one-layer Eagle3 drafter written here in plain torch from
    spec/model.md M3-EAGLE-DRAFT-1..4 (LlamaForCausalLMEagle3 layout:
    fc [H,3H] after per-tap fc_norm, input_layernorm / hidden_norm,
    attention over the 2H input with its own KV, residual with the un-normed
    feature, post_attention_layernorm + SiLU-gated MLP; embed_tokens, the final
    norm and lm_head are NOT trained: they are the target's, the final norm
    applied as the target applies it, Gemma (1+w), eps 1e-6). Loss: soft
    cross-entropy against the target's distribution, with a training-time-test
    unroll of --ttt steps (step k at position i reads the step k-1 output of
    position i-1, attends to the step-0 keys of positions <= i-k and to its
    own chain's keys, exactly as m3's speculative loop runs the drafter);
 4. saves OUTDIR/{config.json, model.safetensors (bf16, drafter-only tensors),
    train_log.json, torch_check.safetensors}. torch_check holds a held-out
    window's taps, tokens and this module's fp32 step-0 logits and features
    computed from the saved (bf16-rounded) weights, for comparison with
    tools/m3np_eagle3.py and bin/m3-ref.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "adapters"))
import hf_dump  # noqa: E402
from demo_train_common import read_verses, encode_corpus, split_val, cosine_lr, fit_steps  # noqa: E402


def default_taps(L):
    """M3-EAGLE-TAP-1 for a target of L layers, ascending (as m3_eagle3_default_taps)."""
    return sorted([min(2, L - 1), L // 2, max(L - 3, 0)])


def rms(x, w, eps, gemma):
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * r) * ((1.0 + w) if gemma else w)


def rope_tables(T, rd, theta, dev):
    i = torch.arange(rd // 2, dtype=torch.float64)
    inv = (1.0 / theta ** (2.0 * i / rd)).to(torch.float32)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    return (torch.cos(ang.double()).float().to(dev), torch.sin(ang.double()).float().to(dev))


def rope(x, cos, sin, rd):
    """x [B, nh, T, hd]; rotate-half pairs (j, j + rd/2) on the first rd dims."""
    h = rd // 2
    x1, x2, rest = x[..., :h], x[..., h:rd], x[..., rd:]
    c, s = cos[None, None], sin[None, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


class Drafter(torch.nn.Module):
    """One Eagle3 decoder layer with fc / fc_norm (LlamaForCausalLMEagle3 names)."""

    def __init__(self, H, nh, hd, I, eps, theta):
        super().__init__()
        self.H, self.nh, self.hd, self.I, self.eps, self.theta = H, nh, hd, I, eps, theta
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(3 * H, H)
        self.fc_norm = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(H)) for _ in range(3)])
        self.input_layernorm = torch.nn.Parameter(torch.ones(H))
        self.hidden_norm = torch.nn.Parameter(torch.ones(H))
        self.post_attention_layernorm = torch.nn.Parameter(torch.ones(H))
        self.q_proj, self.k_proj, self.v_proj = lin(2 * H, nh * hd), lin(2 * H, nh * hd), lin(2 * H, nh * hd)
        self.o_proj = lin(nh * hd, H)
        self.gate_proj, self.up_proj, self.down_proj = lin(H, I), lin(H, I), lin(I, H)

    def public_state(self):
        """Tensors under their checkpoint names (M3-EAGLE-DRAFT-1)."""
        sd = {"fc.weight": self.fc.weight}
        for i in range(3):
            sd["fc_norm.%d.weight" % i] = self.fc_norm[i]
        p = "layers.0."
        sd[p + "input_layernorm.weight"] = self.input_layernorm
        sd[p + "hidden_norm.weight"] = self.hidden_norm
        sd[p + "post_attention_layernorm.weight"] = self.post_attention_layernorm
        for n in ("q", "k", "v", "o"):
            sd[p + "self_attn.%s_proj.weight" % n] = getattr(self, n + "_proj").weight
        for n in ("gate", "up", "down"):
            sd[p + "mlp.%s_proj.weight" % n] = getattr(self, n + "_proj").weight
        return sd

    def combine(self, aux):
        """aux [..., 3H] -> g [..., H] = fc(cat(fc_norm_i(a_i)))  (M3-EAGLE-DRAFT-2)."""
        H = self.H
        parts = [rms(aux[..., i * H:(i + 1) * H], self.fc_norm[i], self.eps, False) for i in range(3)]
        return self.fc(torch.cat(parts, dim=-1))

    def qkv(self, emb, feat, cos, sin):
        B, T, _ = emb.shape
        z = torch.cat([rms(emb, self.input_layernorm, self.eps, False),
                       rms(feat, self.hidden_norm, self.eps, False)], dim=-1)
        sh = lambda t: t.view(B, T, self.nh, self.hd).transpose(1, 2)  # noqa: E731
        q = rope(sh(self.q_proj(z)), cos, sin, self.hd)
        k = rope(sh(self.k_proj(z)), cos, sin, self.hd)
        v = sh(self.v_proj(z))
        return q, k, v

    def tail(self, feat, att):
        """h1 = f + o_proj(att); h2 = h1 + MLP(post_norm(h1)); returns h2 (pre final norm)."""
        B, _, T, _ = att.shape
        h1 = feat + self.o_proj(att.transpose(1, 2).reshape(B, T, self.nh * self.hd))
        x = rms(h1, self.post_attention_layernorm, self.eps, False)
        return h1 + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def unroll(self, emb, g, n_steps, cos, sin, final):
        """Training-time-test unroll. emb [B,T,H] embeddings of the input tokens
        (token i+1 at drafter position i), g [B,T,H] combined target features.
        Returns a list of n_steps outputs o_k [B,T,H] (post final norm); rows
        i < k of o_k have no valid chain and must be masked by the caller."""
        B, T, H = emb.shape
        scale = self.hd ** -0.5
        pos = torch.arange(T, device=emb.device)
        outs, Ks, Vs = [], [], []
        feat = g
        for k in range(n_steps):
            if k > 0:  # step k at i reads the step k-1 output at i-1
                feat = torch.cat([torch.zeros_like(outs[-1][:, :1]), outs[-1][:, :-1]], dim=1)
            q, kk, vv = self.qkv(emb, feat, cos, sin)
            Ks.append(kk)
            Vs.append(vv)
            s0 = torch.matmul(q, Ks[0].transpose(-1, -2)) * scale           # [B,nh,T,T]
            allowed = pos[None, :] <= (pos[:, None] - k)                     # key p <= i - k
            s0 = s0.masked_fill(~allowed, float("-inf"))
            cols, vals = [s0], []
            for j in range(1, k + 1):  # chain keys: step j at position i - (k - j)
                d = k - j
                Kj = torch.roll(Ks[j], shifts=d, dims=2)
                Vj = torch.roll(Vs[j], shifts=d, dims=2)
                sj = (q * Kj).sum(-1, keepdim=True) * scale                 # [B,nh,T,1]
                sj = sj.masked_fill((pos < d)[None, None, :, None], float("-inf"))
                cols.append(sj)
                vals.append(Vj)
            p = torch.softmax(torch.cat(cols, dim=-1), dim=-1)
            p = torch.nan_to_num(p, nan=0.0)
            att = torch.matmul(p[..., :T], Vs[0])
            for j, Vj in enumerate(vals):
                att = att + p[..., T + j:T + j + 1] * Vj
            outs.append(final(self.tail(feat, att)))
        return outs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=150.0)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--rope-theta", type=float, default=5e6)
    a = ap.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    dev = "cuda"
    hf_dump.deterministic()

    # ---- data: as tools/train_demo.py (chunks of 500 verses ending in '\n')
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    tr, va = split_val(encode_corpus(tok, read_verses(a.data)))
    n_val = len(va)
    train_ids = torch.from_numpy(tr).to(dev)
    val_ids = torch.from_numpy(va).to(dev)
    print("tokens: %d train, %d val" % (len(train_ids), n_val), flush=True)

    # ---- target (fp32, eager) with tap hooks
    target, cfg, routers = hf_dump.load_case_model(a.model, dev, "eager")
    hf_dump.set_mode(target, "fp32", routers)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tc = cfg.text_config
    L, H, V = tc.num_hidden_layers, tc.hidden_size, tc.vocab_size
    taps = default_taps(L)
    cap = {}
    lm = target.model.language_model

    def pre_hook(idx):
        def fn(_m, args, kwargs):
            cap[idx] = (args[0] if args else kwargs["hidden_states"]).detach()
        return fn
    for l in sorted(set(taps)):
        lm.layers[l].register_forward_pre_hook(pre_hook(l), with_kwargs=True)
    print("target: L=%d H=%d V=%d taps (residual entering layers) %s" % (L, H, V, taps), flush=True)

    # borrowed tensors, from the public checkpoint exactly as m3 reads them
    pub = load_file(os.path.join(a.model, "model.safetensors"))
    embed = pub["language_model.model.embed_tokens.weight"].float().to(dev)
    lm_head = pub["language_model.lm_head.weight"].float().to(dev)
    fnorm = pub["language_model.model.norm.weight"].float().to(dev)
    t_eps = float(tc.rms_norm_eps)

    def final(h):  # the target's own final norm: Gemma (1 + w), target eps
        return rms(h, fnorm, t_eps, True)

    def target_run(x):
        cap.clear()
        with torch.no_grad():
            logits = target(input_ids=x, use_cache=False).logits.float()
        aux = torch.cat([cap[t] for t in taps], dim=-1).float()
        return logits, aux

    # sanity: our final norm + lm_head on the last layer's output equals HF's logits
    with torch.no_grad():
        x0 = train_ids[:64][None]
        last = {}
        hk = lm.norm.register_forward_pre_hook(
            lambda _m, args, kwargs: last.__setitem__("h", args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True)
        lg, _ = target_run(x0)
        hk.remove()
        mine = final(last["h"].float()) @ lm_head.T
        print("sanity: max |own final norm+lm_head - HF logits| = %.3e" % float((mine - lg).abs().max()),
              flush=True)

    drafter = Drafter(H, a.heads, a.head_dim, a.inter, 1e-6, a.rope_theta).to(dev)
    n_params = sum(p.numel() for p in drafter.parameters())
    print("drafter parameters: %d" % n_params, flush=True)
    cos, sin = rope_tables(a.seq - 1, a.head_dim, a.rope_theta, dev)
    decay = [p for p in drafter.parameters() if p.dim() >= 2]
    nodecay = [p for p in drafter.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    wts = [0.8 ** k for k in range(a.ttt)]

    def batch(src, g):
        off = torch.randint(0, len(src) - a.seq - 1, (a.batch,), generator=g)
        idx = off[:, None].to(dev) + torch.arange(a.seq, device=dev)[None, :]
        return src[idx]

    def step_losses(x):
        logits, aux = target_run(x)
        # drafter position i (0..T-2): token x[i+1], feature of target position i,
        # label = target distribution at row i+1 (the token after x[i+1])
        tp = torch.softmax(logits[:, 1:], dim=-1)
        targ = tp.argmax(-1)
        emb = embed[x[:, 1:]]
        g = drafter.combine(aux[:, :-1])
        outs = drafter.unroll(emb, g, a.ttt, cos, sin, final)
        losses, accs = [], []
        for k, o in enumerate(outs):
            lp = torch.log_softmax(o[:, k:] @ lm_head.T, dim=-1)
            losses.append(-(tp[:, k:] * lp).sum(-1).mean())
            accs.append(float((lp.argmax(-1) == targ[:, k:]).float().mean()))
        return losses, accs

    steps, warm, log = a.steps, 100, []
    t0 = time.time()
    step = 0
    while step < steps:
        lr = cosine_lr(step, steps, warm, a.lr, 0.05)
        for gi in opt.param_groups:
            gi["lr"] = lr
        losses, accs = step_losses(batch(train_ids, gen))
        loss = sum(w * l for w, l in zip(wts, losses)) / sum(wts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 20 and a.max_seconds > 0:
            torch.cuda.synchronize()
            per = (time.time() - t0) / 20
            steps = fit_steps(per, a.max_seconds, steps, 100)
            print("%.3f s/step -> %d steps" % (per, steps), flush=True)
        if step % 100 == 0 or step == steps:
            log.append({"step": step, "loss": [float(l) for l in losses], "acc": accs, "lr": lr,
                        "s": time.time() - t0})
            print("step %d loss %s acc %s %.0fs" % (step, " ".join("%.3f" % float(l) for l in losses),
                                                    " ".join("%.3f" % v for v in accs),
                                                    time.time() - t0), flush=True)
    torch.cuda.synchronize()
    train_s = time.time() - t0

    # ---- round to bf16 (what is saved), then validate that copy
    with torch.no_grad():
        for p in drafter.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        vg = torch.Generator(device="cpu").manual_seed(99)
        vacc = np.zeros(a.ttt)
        vloss = np.zeros(a.ttt)
        for _ in range(10):
            ls, ac = step_losses(batch(val_ids, vg))
            vacc += np.array(ac) / 10
            vloss += np.array([float(l) for l in ls]) / 10
    print("train %.1fs %d steps; val top-1 agreement with the target per unroll step %s, loss %s" %
          (train_s, steps, np.round(vacc, 4).tolist(), np.round(vloss, 4).tolist()), flush=True)

    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in drafter.public_state().items()}
    save_file(sd, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    conf = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": H, "target_hidden_size": H, "num_hidden_layers": 1,
        "num_attention_heads": a.heads, "num_key_value_heads": a.heads, "head_dim": a.head_dim,
        "intermediate_size": a.inter, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": a.rope_theta, "rope_scaling": None, "max_position_embeddings": 4096,
        "vocab_size": V, "draft_vocab_size": V, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False,
        "use_gemma_norm": False, "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": taps, "torch_dtype": "bfloat16",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")

    # ---- torch_check: a held-out window, step-0 logits/features of every position
    with torch.no_grad():
        T = 48
        x = val_ids[1000:1000 + T][None]
        logits, aux = target_run(x)
        emb = embed[x[:, 1:]]
        g = drafter.combine(aux[:, :-1])
        c2, s2 = rope_tables(T - 1, a.head_dim, a.rope_theta, dev)
        o = drafter.unroll(emb, g, 1, c2, s2, final)[0]
        chk = {"tokens": x[0].to(torch.int32).cpu(), "aux": aux[0].cpu().contiguous(),
               "g": g[0].cpu().contiguous(), "feature": o[0].cpu().contiguous(),
               "logits": (o[0] @ lm_head.T).cpu().contiguous(),
               "target_logits": logits[0].cpu().contiguous()}
        save_file(chk, os.path.join(a.out, "torch_check.safetensors"))
    import transformers
    info = {"steps": steps, "train_seconds": train_s, "params": n_params, "taps": taps,
            "val_top1_agreement": vacc.tolist(), "val_loss": vloss.tolist(), "log": log,
            "args": vars(a), "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "total_seconds": time.time() - t_start}
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: info[k] for k in ("steps", "train_seconds", "val_top1_agreement",
                                            "total_seconds")}), flush=True)


if __name__ == "__main__":
    main()
