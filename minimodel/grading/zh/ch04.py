"""The Chinese of chapter 04's check messages (minimodel/grading/ch04/)."""

MESSAGES: dict[str, str] = {
    # rms_norm.py
    " It matches x / sqrt(mean(x^2) + eps) without the weight: multiply by weight.":
        "它与不乘权重的 x / sqrt(mean(x^2) + eps) 一致：还要乘以 weight。",
    " It matches LayerNorm (the mean subtracted first); RMSNorm only divides by the root mean "
    "square, it does not center x.":
        "它与 LayerNorm（先减去均值）一致；RMSNorm 只除以均方根，不对 x 做中心化。",
    " It matches x / sqrt(mean(x) + eps): square x before taking the mean.":
        "它与 x / sqrt(mean(x) + eps) 一致：求均值之前要先对 x 取平方。",
    " It matches x / (sqrt(mean(x^2)) + eps): eps goes inside the square root.":
        "它与 x / (sqrt(mean(x^2)) + eps) 一致：eps 应当放在平方根里面。",
    " It matches x / sqrt(mean(x^2)) with no eps: add eps inside the square root.":
        "它与不加 eps 的 x / sqrt(mean(x^2)) 一致：要在平方根里加上 eps。",
    " It matches x / sqrt(sum(x^2) + eps): take the mean over C, not the sum.":
        "它与 x / sqrt(sum(x^2) + eps) 一致：沿 C 要取均值，而不是求和。",
    " It normalises over the first dim; normalise over the last dim (C).":
        "它沿第一维做了归一化；应当沿最后一维（C）归一化。",
    "{what} changed x in place; return a new tensor instead.":
        "{what} 原地修改了 x；应当返回一个新张量。",
    "{what} is off from x / sqrt(mean(x^2) + eps) * weight: max abs diff {worst:.3g}.{nan}{hint}":
        "{what} 与 x / sqrt(mean(x^2) + eps) * weight 不符：最大绝对误差 {worst:.3g}。{nan}{hint}",
    " It contains NaN or inf.": "结果中含有 NaN 或 inf。",
    "keeps x's shape for [C], [T, C], [B, T, C] and [B, T, H, D]":
        "对 [C]、[T, C]、[B, T, C] 和 [B, T, H, D] 都保持 x 的形状",
    "rms_norm(x of shape {shape}, ...)": "rms_norm(形状为 {shape} 的 x, ...)",
    "equals x / sqrt(mean(x²) + eps) * weight over the last dim":
        "沿最后一维计算，等于 x / sqrt(mean(x²) + eps) * weight",
    "puts eps inside the square root, and maps zeros to zeros (no NaN)":
        "eps 放在平方根里面，全零输入得到全零输出（没有 NaN）",
    "rms_norm of an all-zero row should be all zeros, got {got}: eps keeps the division finite.":
        "全零的一行经过 rms_norm 后应当仍是全零，实际得到了 {got}：eps 的作用就是让除法结果"
        "保持有限。",
    "non-zero values": "非零值",
    "returns x's dtype for float32, bfloat16 and float16 inputs":
        "输入为 float32、bfloat16 和 float16 时都返回 x 的 dtype",
    "rms_norm of {dtype} x (weight {dtype}) returned {got}; compute in float32, then cast back "
    "to x's dtype.":
        "对 {dtype} 的 x（weight 也是 {dtype}），rms_norm 返回了 {got}；应当用 float32 计算，"
        "再转换回 x 的 dtype。",
    "computes in float32 for bfloat16 input (no per-row rounding bias)":
        "bfloat16 输入也用 float32 计算（没有逐行的舍入偏差）",
    "in bfloat16 each row of rms_norm(x) is scaled {percent:.2f}% off on average (float32 math "
    "stays below 0.07%): compute mean(x^2) and x * rsqrt(...) in float32, then cast the result "
    "to x's dtype.":
        "在 bfloat16 下，rms_norm(x) 每一行的缩放平均偏差了 {percent:.2f}%（用 float32 计算时"
        "低于 0.07%）：应当用 float32 计算 mean(x^2) 和 x * rsqrt(...)，再把结果转换为 x 的 "
        "dtype。",
    "does not overflow in float16 when x² exceeds 65504":
        "x² 超过 65504 时在 float16 下也不溢出",
    "rms_norm of float16 x with |x| in the hundreds gave NaN, inf or zeros: x^2 overflows "
    "float16 (max 65504). Square and average in float32.":
        "对 |x| 在几百量级的 float16 x，rms_norm 给出了 NaN、inf 或零：x^2 超出了 float16 的"
        "范围（最大 65504）。平方和求均值要用 float32 来做。",
    # fused.py
    "fused_add_rms_norm should return a pair (normed, new_residual), got {type} of {n}.":
        "fused_add_rms_norm 应当返回一对值 (normed, new_residual)，实际是含 {n} 个元素的 "
        "{type}。",
    "fused_add_rms_norm should return a pair (normed, new_residual), got {type}.":
        "fused_add_rms_norm 应当返回一对值 (normed, new_residual)，实际是 {type}。",
    "normed (the first output)": "normed（第一个输出）",
    "new_residual (the second output)": "new_residual（第二个输出）",
    "for x {shape} {dtype}": "（x 为 {shape} {dtype}）",
    "{name} has dtype {dtype} {where}; return x's dtype.":
        "{name} 的 dtype 是 {dtype}{where}；应当返回 x 的 dtype。",
    " It equals the old residual: the new residual stream is x + residual.":
        "它等于旧的残差：新的残差流是 x + residual。",
    " It equals the normed output: the residual stream carries x + residual un-normalised, or "
    "every layer's input would shrink to RMS 1.":
        "它等于归一化后的输出：残差流传递的是未经归一化的 x + residual，否则每一层的输入都会"
        "被压到 RMS 为 1。",
    " It equals x: add the old residual to it.": "它等于 x：还要加上旧的残差。",
    "new_residual (the second output) is not x + residual {where}.{hint}":
        "new_residual（第二个输出）不等于 x + residual{where}。{hint}",
    " It equals rms_norm(x): normalise the sum x + residual.":
        "它等于 rms_norm(x)：要归一化的是二者之和 x + residual。",
    " It equals x + residual: did you swap the two outputs?":
        "它等于 x + residual：是不是把两个输出的顺序弄反了？",
    "normed (the first output) is off from rms_norm(x + residual) {where}: max abs diff "
    "{worst:.3g}.{hint}":
        "normed（第一个输出）与 rms_norm(x + residual) 不符{where}：最大绝对误差 {worst:.3g}。"
        "{hint}",
    "returns (rms_norm(x + residual), x + residual)":
        "返回 (rms_norm(x + residual), x + residual)",
    "keeps the dtype in bfloat16 and float16": "在 bfloat16 和 float16 下保持 dtype 不变",
    "chained over 3 layers equals the explicit x + f(norm(x))":
        "串联 3 层后，与显式的 x + f(norm(x)) 结果相等",
    "the final hidden state of the fused chain": "融合串联后最终的隐藏状态",
    # swiglu.py
    " It matches relu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).":
        "它与 relu(gate) * up 一致：Qwen3 用的是 silu(z) = z * sigmoid(z)。",
    " It matches gelu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).":
        "它与 gelu(gate) * up 一致：Qwen3 用的是 silu(z) = z * sigmoid(z)。",
    " It matches sigmoid(gate) * up: silu is z * sigmoid(z), not sigmoid(z).":
        "它与 sigmoid(gate) * up 一致：silu 是 z * sigmoid(z)，而不是 sigmoid(z)。",
    " It matches gate * silu(up): the activation goes on the gate projection.":
        "它与 gate * silu(up) 一致：激活函数应当作用在 gate 投影上。",
    " It matches silu(gate * up): apply silu to the gate alone, then multiply.":
        "它与 silu(gate * up) 一致：先只对 gate 做 silu，再相乘。",
    " It matches silu(gate) without the up projection: multiply by up(x).":
        "它与缺了 up 投影的 silu(gate) 一致：还要乘以 up(x)。",
    " It matches gate * up with no activation: apply silu to the gate.":
        "它与不加激活函数的 gate * up 一致：要对 gate 做 silu。",
    "{what} returned {got}; keep x's dtype.": "{what} 返回了 {got}；应当保持 x 的 dtype。",
    "{what} is off from down(silu(gate(x)) * up(x)): max abs diff {worst:.3g}.{hint}":
        "{what} 与 down(silu(gate(x)) * up(x)) 不符：最大绝对误差 {worst:.3g}。{hint}",
    "returns [..., C] for 1-D to 3-D inputs (weights [I, C], [I, C], [C, I])":
        "对 1 维到 3 维的输入都返回 [..., C]（权重为 [I, C]、[I, C]、[C, I]）",
    "equals down(silu(gate(x)) * up(x))": "等于 down(silu(gate(x)) * up(x))",
    "works in bfloat16 and float16": "在 bfloat16 和 float16 下也能正确运行",
    # merge_qkv.py
    "returns [(Hq + 2*Hkv) * D, C] for MHA, GQA, MQA and Hq*D != C":
        "对 MHA、GQA、MQA 以及 Hq*D != C 的情况都返回 [(Hq + 2*Hkv) * D, C]",
    "merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}":
        "C={C}, Hq={Hq}, Hkv={Hkv}, D={D} 时的 merge_qkv",
    "one matmul x @ W.T then a split gives q, k, v (in that order)":
        "一次矩阵乘法 x @ W.T 再拆分，依次得到 q、k、v",
    "{where}: the {name} slice of x @ merged.T is not x @ w_{name}.T. Stack the rows of w_q, "
    "then w_k, then w_v along dim 0 (the order of PACKED_MODULES['qkv_proj']).":
        "{where}：x @ merged.T 中对应 {name} 的那一段不等于 x @ w_{name}.T。"
        "应当沿 dim 0 依次堆叠 w_q、w_k、w_v 的行（即 PACKED_MODULES['qkv_proj'] 的顺序）。",
    "keeps the weights' dtype and values exactly (bfloat16)":
        "原样保持权重的 dtype 和数值（bfloat16）",
    "merge_qkv of bfloat16 weights": "对 bfloat16 权重调用的 merge_qkv",
    "merge_qkv of bfloat16 weights returned {dtype}; keep their dtype.":
        "对 bfloat16 权重，merge_qkv 返回了 {dtype}；应当保持权重的 dtype。",
    "merge_qkv changed the weights' values: the merged weight holds the rows of w_q, then w_k, "
    "then w_v, exactly as they are (no transpose, no arithmetic).":
        "merge_qkv 改变了权重的数值：合并后的权重依次原样存放 w_q、w_k、w_v 的行"
        "（不转置，也不做任何运算）。",
    # capstone.py
    "embed (chapter 01)": "embed（第 01 章）",
    "apply_rope or rope_qkv (chapter 02)": "apply_rope 或 rope_qkv（第 02 章）",
    "attention (chapter 03)": "attention（第 03 章）",
    "rms_norm (this chapter)": "rms_norm（本章）",
    "swiglu (this chapter)": "swiglu（本章）",
    "my_qwen3_forward on ids [{B}, {T}], {shape}":
        "my_qwen3_forward（ids 为 [{B}, {T}]，{shape}）",
    "my_qwen3_forward on ids [{B}, {T}] (left-padded, real lengths {lengths}), {shape}":
        "my_qwen3_forward（ids 为 [{B}, {T}]，左填充，真实长度 {lengths}，{shape}）",
    "the logits of {where}": "{where} 的 logits",
    "the logits of {where} have dtype {dtype}; the weights are float32, so the logits should "
    "be too.":
        "{where} 的 logits 的 dtype 是 {dtype}；权重是 float32，logits 也应当是 float32。",
    "{where} gives NaN at real positions. A padding query that may read no key at all gets a "
    "softmax over -inf only (NaN); the NaN then reaches real tokens through the next layer's "
    "values, even where their weight is 0 (0 * NaN = NaN).":
        "{where} 在真实位置上给出了 NaN。一个填充位置的查询如果一个键都读不到，它的 softmax "
        "就只在 -inf 上计算（得到 NaN）；这个 NaN 随后会通过下一层的值传到真实 token 上，"
        "即使它的权重是 0 也一样（0 * NaN = NaN）。",
    "{where} gives NaN logits.": "{where} 给出的 logits 中有 NaN。",
    " Even one token alone is off. A single token's attention reads only its own value vector, "
    "so q, k, RoPE and the mask play no part there: look at the embedding, the norms and their "
    "weights, the residual adds, the MLP, v and o_proj, the final norm and the LM head.":
        "连单独一个 token 都算错了。单个 token 的注意力只读取它自己的值向量，q、k、RoPE "
        "和掩码在这里都不起作用：请检查嵌入、各个归一化及其权重、残差相加、MLP、v 和 o_proj、"
        "最终的归一化以及 LM head。",
    " One token alone comes out right, so the mistake is where tokens meet: q and k (QK-norm, "
    "RoPE and its positions), the causal mask, the padding, the scores.":
        "单独一个 token 的结果是对的，所以错误出在 token 之间交互的地方：q 和 k（QK 归一化、"
        "RoPE 及其位置）、因果掩码、填充、分数。",
    "{where}: the logits are off from the reference model's by up to {worst:.3g} (allowed "
    "{atol:g}).{hint}":
        "{where}：logits 与参考实现的相差最多 {worst:.3g}（允许 {atol:g}）。{hint}",
    "returns float32 logits [B, T, V] for bard's weights":
        "在 bard 的权重上返回 float32 的 logits [B, T, V]",
    "my_qwen3_forward returned {dtype} logits; float32 weights give float32.":
        "my_qwen3_forward 返回的 logits 是 {dtype}；float32 的权重应当得到 float32 的 logits。",
    "equals the reference model within 1e-4 on 3 prompts (verse, Chinese, one token)":
        "在 3 个提示词（诗句、中文、单个 token）上与参考实现的相差在 1e-4 以内",
    "a left-padded batch of 3 prompts: equal at every real position":
        "3 个提示词组成的左填充 batch：每个真实位置上都相等",
    "random small models: MQA, Hq*D != C, untied LM head, random lengths and padding":
        "随机的小模型：MQA、Hq*D != C、不共享权重的 LM head、随机长度和填充",
    "is built from your own embed, RoPE, attention, rms_norm and swiglu":
        "由你自己的 embed、RoPE、attention、rms_norm 和 swiglu 搭成",
    "my_qwen3_forward never called your own {missing}. The capstone is your model: it must run "
    "the functions you wrote (loaded with learner_module from your notebooks of chapters 01-03, "
    "and this notebook's), not the package's.":
        "my_qwen3_forward 从没调用过你自己的 {missing}。综合练习是你自己的模型：它必须运行你写的"
        "函数（用 learner_module 从你第 01-03 章的 notebook 以及本 notebook 加载），而不是本包"
        "里的。",
    ", ": "、",
}
