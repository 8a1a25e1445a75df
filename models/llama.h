// llama: a Llama-style decoder (Touvron et al. 2023) on synthetic token sequences.
//
// Stages: the token embedding; per block an attention stage, x + Wo Attention(RoPE(Wq n),
// RoPE(Wk n), Wv n) with n = RMSNorm1(x), causal, with grouped-query attention (`kv_heads`
// key/value heads, each shared by heads / kv_heads query heads), and an MLP stage,
// x + W2 (SiLU(W1 n) * W3 n) with n = RMSNorm2(x) (SwiGLU); last the head: final RMSNorm, an
// untied LM head and the next-token cross-entropy, so the head stage returns the loss. No
// biases, no dropout. Rotary position embedding (base 10000) rotates each query and key by its
// position, so a chunk of queries is rotated by the positions it holds and chunking changes no
// arithmetic. No tokenizer, no downloaded weights: tokens are drawn from a seeded generator and
// the targets are the tokens shifted by one.
//
// What it exports, for a test of their arithmetic: the RMSNorm and the rotary embedding its
// stages use.
#pragma once

#include <cstdint>

#include "ATen/core/Tensor.h"

namespace ckpt {

// RMSNorm over the last dimension: x r w, with r = 1 / sqrt(mean(x^2) + eps) and w a learned
// scale. One autograd node with its own backward, which keeps x, w and r and returns a single
// gradient for x, r (g w - x r mean(g w x r)): built of primitive ops, x would reach backward by
// two paths whose gradients add up in an order that depends on what a plan recomputes, and
// float addition is not associative.
at::Tensor RmsNormFunction(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary position embedding of [B, H, S, d] (d even) at positions [offset, offset + S): the
// pairs (x_i, x_{i + d/2}) rotated by the angle position / 10000^(2i / d). Element by element,
// so a chunk is rotated exactly as the same positions of the whole sequence are.
at::Tensor Rotary(const at::Tensor& x, int64_t offset);

}  // namespace ckpt
