#!/usr/bin/env python3
"""train_demo.py — train the m3 demo model (models/demo) on the King James Bible.

Runs on a machine with a GPU, torch, transformers >= 5.17 (minimax_m3_vl),
tokenizers and safetensors (the m3 device machine). Never needed by m3 itself.

    python3 tools/train_demo.py --data .demo-data/kjv.txt --out OUTDIR
            [--steps 3000] [--max-seconds 270] [--seed 1234]

Steps:
 1. byte-level BPE tokenizer (HF `tokenizers`, MiniMax split regex of notes E.1,
    2048 trained tokens, then the 61 MiniMax special tokens as added specials);
 2. a miniature MiniMax-M3 text model built from transformers' own
    `minimax_m3_vl` classes (3 dense layers + 3 MoE/MSA layers, GQA, partial
    RoPE, lightning indexer, sigmoid router with correction bias, shared expert);
 3. AdamW, bf16 autocast (router in fp32), fixed seeds, deterministic data order
    (a torch.Generator draws the batch offsets). The step count is --steps,
    lowered once after 20 timed steps if --max-seconds would be exceeded
    (the value used is written to OUTDIR/train_log.json; pass it back with
    --max-seconds 0 to repeat a run). The correction bias is adjusted by the
    aux-loss-free rule (bias += rate * sign(mean load - load)), not by gradients;
 4. the model is saved in the public checkpoint layout (notes A.2; released-
    dialect config.json; bf16 weights, fp32 router and correction bias), with
    generation_config.json, tokenizer.json and tokenizer_config.json;
 5. the saved checkpoint is reloaded with tools/adapters/hf_dump.py (public ->
    HF v5 names) and HF's fp32 forward records greedy continuations (KV cache)
    for fixed prompts and the full logits of one longer prompt, written to
    OUTDIR/hf_expected.safetensors for tools/check_demo.py.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from safetensors.torch import save_file
from safetensors.numpy import save_file as save_np
from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "adapters"))
from hf_tokenizers_vectors import RE_MINIMAX, MINIMAX_SPECIALS  # noqa: E402
import hf_dump  # noqa: E402
from demo_train_common import (read_verses, encode_corpus, split_val, cosine_lr,  # noqa: E402
                               fit_steps)

N_BPE = 2048            # trained tokens (256 byte symbols included)
VOCAB = 2112            # embedding rows: 2048 + 61 specials, padded to a multiple of 64
PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd"]
N_GREEDY = 40
LOGIT_TEXT = ("And it came to pass, when men began to multiply on the face of the earth, "
              "and daughters were born unto them, That the sons of God saw the daughters of men "
              "that they were fair; and they took them wives of all which they chose.")


def make_config():
    """Released-dialect config.json (the form of the real MiniMax-M3 config)."""
    L = 6
    bos = N_BPE + MINIMAX_SPECIALS.index("]~!b[")
    eos = N_BPE + MINIMAX_SPECIALS.index("[e~[")
    text = {
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "attention_output_gate": False,
        "bos_token_id": bos, "eos_token_id": eos,
        "dense_intermediate_size": 384,
        "head_dim": 64, "hidden_act": "swigluoai", "hidden_size": 192,
        "intermediate_size": 64,
        "max_position_embeddings": 4096,
        "moe_layer_freq": [0, 0, 0, 1, 1, 1],
        "n_shared_experts": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_experts_per_tok": 2, "num_local_experts": 8,
        "num_hidden_layers": L,
        "num_mtp_modules": 0, "num_nextn_predict_layers": 0,
        "partial_rotary_factor": 0.5, "rotary_dim": 32,
        "qk_norm_type": "per_head", "rms_norm_eps": 1e-06,
        "rope_theta": 5000000,
        "routed_scaling_factor": 2.0, "scoring_func": "sigmoid",
        "shared_intermediate_size": 128,
        "sparse_attention_config": {
            "sparse_attention_freq": [0, 0, 0, 1, 1, 1],
            "sparse_block_size": 16,
            "sparse_disable_index_value": [0, 0, 0, 1, 1, 1],
            "sparse_index_dim": 64,
            "sparse_init_block": 0,
            "sparse_local_block": 1,
            "sparse_num_index_heads": 2,
            "sparse_score_type": "max",
            "sparse_topk_blocks": 2,
            "use_sparse_attention": True,
        },
        "swiglu_alpha": 1.702, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "use_gemma_norm": True, "use_qk_norm": True,
        "use_routing_bias": True, "vocab_size": VOCAB,
    }
    return {"architectures": ["MiniMaxM3SparseForConditionalGeneration"],
            "model_type": "minimax_m3_vl", "text_config": text, "torch_dtype": "bfloat16"}


def train_tokenizer(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(RE_MINIMAX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=N_BPE, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer=tr)
    assert tok.get_vocab_size() == N_BPE, tok.get_vocab_size()
    tok.add_special_tokens(MINIMAX_SPECIALS)
    assert tok.token_to_id("]!p~[") == N_BPE
    return tok


def to_public(sd, cfg):
    """HF v5 state dict -> public checkpoint layout (notes A.2/A.4)."""
    tc = cfg.text_config
    out = {}
    I, Is = tc.intermediate_size, tc.shared_intermediate_size
    bf = torch.bfloat16
    for k, v in sd.items():
        v = v.detach().cpu()
        if k == "lm_head.weight":
            out["language_model.lm_head.weight"] = v.to(bf)
            continue
        if not k.startswith("model.language_model."):
            continue
        r = k[len("model.language_model."):]
        if "rotary_emb" in r:
            continue
        p = "language_model.model."
        if ".mlp.gate.weight" in r:
            out[p + r.replace(".mlp.gate.weight", ".block_sparse_moe.gate.weight")] = v.float()
        elif ".mlp.gate.e_score_correction_bias" in r:
            out[p + r.replace(".mlp.gate.e_score_correction_bias",
                              ".block_sparse_moe.e_score_correction_bias")] = v.float()
        elif r.endswith(".mlp.experts.gate_up_proj"):
            base = p + r[:-len("mlp.experts.gate_up_proj")] + "block_sparse_moe.experts."
            for e in range(v.shape[0]):
                out[base + "%d.w1.weight" % e] = v[e, :I].to(bf).contiguous()
                out[base + "%d.w3.weight" % e] = v[e, I:].to(bf).contiguous()
        elif r.endswith(".mlp.experts.down_proj"):
            base = p + r[:-len("mlp.experts.down_proj")] + "block_sparse_moe.experts."
            for e in range(v.shape[0]):
                out[base + "%d.w2.weight" % e] = v[e].to(bf).contiguous()
        elif r.endswith(".mlp.shared_experts.gate_up_proj.weight"):
            base = p + r[:-len("mlp.shared_experts.gate_up_proj.weight")] + "block_sparse_moe.shared_experts."
            out[base + "gate_proj.weight"] = v[:Is].to(bf).contiguous()
            out[base + "up_proj.weight"] = v[Is:].to(bf).contiguous()
        elif r.endswith(".mlp.shared_experts.down_proj.weight"):
            out[p + r.replace(".mlp.shared_experts.", ".block_sparse_moe.shared_experts.")] = v.to(bf)
        elif r.endswith(".mlp.gate_up_proj.weight"):
            n = v.shape[0] // 2
            base = p + r[:-len("gate_up_proj.weight")]
            out[base + "gate_proj.weight"] = v[:n].to(bf).contiguous()
            out[base + "up_proj.weight"] = v[n:].to(bf).contiguous()
        else:
            r = r.replace(".self_attn.indexer.q_", ".self_attn.index_q_").replace(
                ".self_attn.indexer.k_", ".self_attn.index_k_")
            out[p + r] = v.to(bf).contiguous()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-seconds", type=float, default=270.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    a = ap.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    dev = "cuda"

    lines = read_verses(a.data)
    tok = train_tokenizer(lines)
    ids = encode_corpus(tok, lines)
    tr, va = split_val(ids)
    n_val = len(va)
    train_ids = torch.from_numpy(tr).to(dev)
    val_ids = torch.from_numpy(va).to(dev)
    print("tokens: %d train, %d val (%.2f bytes/token)" %
          (len(train_ids), n_val, sum(len(l) + 1 for l in lines) / len(ids)), flush=True)

    raw = make_config()
    cfg = hf_dump.build_config(raw)
    torch.manual_seed(a.seed)
    model = hf_dump.hfmod.MiniMaxM3SparseForConditionalGeneration(cfg)
    hf_dump.set_impl(model, "eager")
    model = model.to(dev).float().train()
    layers = model.model.language_model.layers
    moe = [l.mlp for l in layers if isinstance(l.mlp, hf_dump.hfmod.MiniMaxM3VLSparseMoeBlock)]
    loads = {}

    def wrap_gate(g, i):
        fwd = g.forward

        def f(x, *args, **kw):
            with torch.autocast("cuda", enabled=False):
                out = fwd(x.float(), *args, **kw)
            loads[i] = out[2].detach()
            return out
        g.forward = f
    for i, m in enumerate(moe):
        wrap_gate(m.gate, i)
    n_params = sum(p.numel() for n, p in model.named_parameters()
                   if n.startswith("model.language_model.") or n == "lm_head.weight")
    print("text parameters: %d" % n_params, flush=True)

    params = [p for n, p in model.named_parameters()
              if n.startswith("model.language_model.") or n == "lm_head.weight"]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    E = cfg.text_config.num_local_experts

    def batch(src, g):
        off = torch.randint(0, len(src) - a.seq - 1, (a.batch,), generator=g)
        idx = off[:, None].to(dev) + torch.arange(a.seq + 1, device=dev)[None, :]
        t = src[idx]
        return t[:, :-1], t[:, 1:]

    def loss_of(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))

    steps = a.steps
    warm = 100
    log = []
    t0 = time.time()
    step = 0
    while step < steps:
        lr = cosine_lr(step, steps, warm, a.lr, 0.1)
        for gi in opt.param_groups:
            gi["lr"] = lr
        x, y = batch(train_ids, gen)
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():  # aux-loss-free balancing of the correction bias
            for i, m in enumerate(moe):
                cnt = torch.bincount(loads[i].reshape(-1), minlength=E).float()
                m.gate.e_score_correction_bias += 1e-3 * torch.sign(cnt.mean() - cnt)
        step += 1
        if step == 20 and a.max_seconds > 0:
            torch.cuda.synchronize()
            per = (time.time() - t0) / 20
            steps = fit_steps(per, a.max_seconds, steps, 200)
            print("%.3f s/step -> %d steps" % (per, steps), flush=True)
        if step % 100 == 0 or step == steps:
            log.append({"step": step, "loss": float(loss), "lr": lr, "s": time.time() - t0})
            print("step %d loss %.4f lr %.2e %.0fs" % (step, float(loss), lr, time.time() - t0), flush=True)
    torch.cuda.synchronize()
    train_s = time.time() - t0
    model.eval()
    vg = torch.Generator(device="cpu").manual_seed(99)
    with torch.no_grad():
        vl = float(np.mean([float(loss_of(*batch(val_ids, vg))) for _ in range(10)]))
    print("train %.1fs, %d steps, val loss %.4f" % (train_s, steps, vl), flush=True)

    # ---- save: public layout, bf16 (router + bias fp32)
    pub = to_public(model.state_dict(), cfg)
    save_file(pub, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(raw, f, indent=2, sort_keys=True)
        f.write("\n")
    tc = raw["text_config"]
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tc["bos_token_id"], "eos_token_id": tc["eos_token_id"],
                   "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40}, f, indent=2)
        f.write("\n")
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "]~!b[", "eos_token": "[e~[",
                   "unk_token": "]!d~[", "add_bos_token": False, "add_prefix_space": False,
                   "clean_up_tokenization_spaces": False, "model_max_length": 4096}, f, indent=2)
        f.write("\n")

    # ---- HF fp32 reference on the saved checkpoint (what m3 must reproduce)
    hf_dump.deterministic()
    ref, rcfg, routers = hf_dump.load_case_model(a.out, dev, "eager")
    hf_dump.set_mode(ref, "fp32", routers)
    exp = {}
    samples = {}
    for i, p in enumerate(PROMPTS):
        pid = tok.encode(p).ids
        t = torch.tensor(pid, dtype=torch.long, device=dev)
        g1, _ = hf_dump.greedy(ref, t, N_GREEDY, use_cache=True)
        g2, _ = hf_dump.greedy(ref, t, N_GREEDY, use_cache=False)
        exp["prompt%d.ids" % i] = np.array(pid, dtype=np.int32)
        exp["prompt%d.greedy" % i] = np.array(g1, dtype=np.int32)
        samples[p] = {"greedy_text": tok.decode(g1), "cache_equals_nocache": g1 == g2}
        print(repr(p), "->", repr(tok.decode(g1)), "cache==nocache:", g1 == g2, flush=True)
    lid = tok.encode(LOGIT_TEXT).ids
    res = hf_dump.dump(ref, torch.tensor(lid, dtype=torch.long, device=dev), 0)
    exp["logits.ids"] = np.array(lid, dtype=np.int32)
    exp["logits"] = res["logits"].astype(np.float32)
    for k in sorted(res):
        if k.endswith("attn.block_indices") or k.endswith("moe.topk_index"):
            exp["logits." + k] = res[k].astype(np.int32)
    meta = {"prompts": json.dumps(PROMPTS), "logit_text": LOGIT_TEXT,
            "generator": "tools/train_demo.py (HF transformers fp32, eager, KV cache)"}
    save_np({k: np.ascontiguousarray(v) for k, v in exp.items()},
            os.path.join(a.out, "hf_expected.safetensors"), metadata=meta)
    # a sampled continuation too, for the docs
    torch.manual_seed(7)
    t = torch.tensor(tok.encode("And God said").ids, device=dev)[None]
    try:
        with torch.no_grad():
            s = ref.generate(input_ids=t, max_new_tokens=48, do_sample=True, temperature=0.7,
                             top_p=0.9, top_k=40, pad_token_id=0)
        sampled = tok.decode(s[0].tolist())
    except Exception as exc:  # only for the docs
        sampled = "generate() failed: %s" % exc
    import transformers
    info = {"steps": steps, "train_seconds": train_s, "val_loss": vl, "log": log,
            "params_text": n_params, "train_tokens": int(len(train_ids)), "val_tokens": int(n_val),
            "tokens_per_second": steps * a.batch * a.seq / train_s,
            "args": vars(a), "samples": samples, "sampled": sampled,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "total_seconds": time.time() - t_start,
            "experts_used_per_layer": {str(i): int((torch.bincount(loads[i].reshape(-1), minlength=E) > 0).sum())
                                       for i in loads},
            "bias": {str(i): m.gate.e_score_correction_bias.tolist() for i, m in enumerate(moe)}}
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: info[k] for k in ("steps", "train_seconds", "val_loss", "tokens_per_second",
                                            "total_seconds", "sampled")}), flush=True)


if __name__ == "__main__":
    main()
