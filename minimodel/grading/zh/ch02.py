"""The Chinese of chapter 02's check messages (minimodel/grading/ch02/)."""

MESSAGES: dict[str, str] = {
    # common.py, mistakes.py: the mistakes a failure message names
    "pairs neighbours (2i, 2i+1) as in the RoFormer paper; Qwen3 pairs dimension i with "
    "i + D/2, so columns i and i + D/2 carry the same angle":
        "像 RoFormer 论文那样把相邻的维度 (2i, 2i+1) 配成一对；Qwen3 是把维度 i 与 i + D/2 "
        "配对，所以第 i 列和第 i + D/2 列的角度相同",
    "; it {mistake}": "；它{mistake}",
    "uses the exponent i/D; the frequency of pair i is theta^(-2i/D)":
        "用的指数是 i/D；第 i 对的频率应为 theta^(-2i/D)",
    "uses theta^(+2i/D); the frequency of pair i is theta^(-2i/D), slower for larger i":
        "用的是 theta^(+2i/D)；第 i 对的频率应为 theta^(-2i/D)，i 越大转得越慢",
    "ignores theta (it looks like theta = {theta:g})":
        "忽略了 theta（看上去用的是 theta = {theta:g}）",
    "ignores the positions it is given and uses 0, 1, ..., T-1":
        "没有用传入的位置，而是用了 0, 1, ..., T-1",
    "is one position ahead: position p must rotate by p * frequency":
        "超前了一个位置：位置 p 的旋转角应为 p * 频率",
    "swaps cos and sin": "把 cos 和 sin 弄反了",
    "negates sin in the second half; the minus sign belongs to rotate_half, the table repeats "
    "the same angles":
        "给后一半的 sin 加了负号；负号属于 rotate_half，表里只是把相同的角度重复一遍",
    "negates sin in the first half; the minus sign belongs to rotate_half, the table repeats "
    "the same angles":
        "给前一半的 sin 加了负号；负号属于 rotate_half，表里只是把相同的角度重复一遍",
    "rotates the wrong way: every pair turns by minus its angle (a sign in the turn of the "
    "pairs is flipped)":
        "转反了方向：每一对都转了负的角度（旋转维度对时有一个符号弄反了）",
    "returns x unrotated": "返回了没有旋转的 x",
    "pairs dimension i with i + D/2, Qwen3's rotate-half; this exercise pairs neighbours "
    "(2i, 2i+1)":
        "把维度 i 与 i + D/2 配成了一对，这是 Qwen3 的 rotate-half；这道练习要把相邻的维度 "
        "(2i, 2i+1) 配成一对",
    "pairs neighbours, but its angles are laid out as for rotate-half, so the two dimensions of "
    "a pair turn by different angles":
        "把相邻的维度配成了一对，角度却是按 rotate-half 的方式排布的，于是同一对中的两个维度转过"
        "的角度不同",
    "rotates the wrong way: every pair turns by minus its angle":
        "转反了方向：每一对都转了负的角度",
    # ch02.rope_tables
    "{what} should return a tuple (cos, sin), got {got}":
        "{what} 应当返回元组 (cos, sin)，实际是 {got}",
    "{what}: {name}": "{what}：{name}",
    "{what}: {name} [T, D] (each of the D/2 angles appears twice)":
        "{what}：{name} [T, D]（D/2 个角度各出现两次）",
    "{what}: {name} should be a float tensor, got {got}":
        "{what}：{name} 应当是浮点张量，实际是 {got}",
    "{what}: {name} is {dtype}, but a 16-bit float cannot hold angles like 1000 * 0.97 "
    "precisely enough; the tables are float32":
        "{what}：{name} 是 {dtype}，但 16 位浮点数无法足够精确地表示 1000 * 0.97 这样的角度；"
        "表应当是 float32",
    "returns (cos, sin), each float [T, D], for several T and D":
        "返回 (cos, sin)，各为浮点 [T, D]；覆盖多种 T 和 D",
    "{n} cases": "{n} 个用例",
    "position 0 gives cos = 1 and sin = 0 (no rotation)": "位置 0 给出 cos = 1、sin = 0（不旋转）",
    "{what}: at position 0 every cos should be 1 and every sin 0, got cos {cos}... and sin "
    "{sin}...":
        "{what}：位置 0 处的 cos 应当全为 1、sin 全为 0，实际 cos 为 {cos}...，sin 为 {sin}...",
    "the two halves are equal: dimension i pairs with i + D/2":
        "前后两半相等：维度 i 与 i + D/2 配对",
    "; your table {mistake}": "；你的表{mistake}",
    "; your sin halves differ in sign: the minus sign belongs to rotate_half, the table repeats "
    "the same angles":
        "；你的 sin 前后两半符号相反：负号属于 rotate_half，表里只是把相同的角度重复一遍",
    "{what}: columns i and i + D/2 should hold the same angle{why}":
        "{what}：第 i 列和第 i + D/2 列应当是同一个角度{why}",
    "matches minimodel.ops.rope_cos_sin for thetas 1e4 and 1e6 and any positions":
        "theta 为 1e4 和 1e6、位置任意时，都与 minimodel.ops.rope_cos_sin 一致",
    # ch02.apply_rope, ch02.rope_interleaved
    "Qwen3 pairs dimension i with i + D/2": "Qwen3 把维度 i 与 i + D/2 配成一对",
    "this convention pairs neighbours (2i, 2i+1)": "这种约定把相邻的维度 (2i, 2i+1) 配成一对",
    "{what} should return {want} like x, got {got}: the layers around RoPE work in x's dtype":
        "{what} 应当和 x 一样返回 {want}，实际是 {got}：RoPE 前后的层都以 x 的 dtype 计算",
    "; the same x in float32 comes out right, so precision is lost on the way: a 16-bit float "
    "cannot even hold position 1001, and angles, cos/sin or products kept in 16 bits lose the "
    "digits the rotation needs":
        "；同一个 x 用 float32 算是对的，所以是计算途中丢了精度：16 位浮点数连位置 1001 都表示"
        "不了，用 16 位保存角度、cos/sin 或乘积，会丢掉旋转所需的有效数字",
    "; it is off in float32 too (see the float32 check)":
        "；它在 float32 下也不对（见 float32 那项检查）",
    "keeps x's shape [T, H, D] and dtype (float32, bfloat16, float16)":
        "保持 x 的形状 [T, H, D] 和 dtype（float32、bfloat16、float16）",
    "matches minimodel.ops.apply_rope in float32": "float32 下与 minimodel.ops.apply_rope 一致",
    "matches the reference in float32": "float32 下与参考实现一致",
    "matches minimodel.ops.apply_rope in bfloat16 and float16, within their precision":
        "bfloat16 和 float16 下，在其精度范围内与 minimodel.ops.apply_rope 一致",
    "matches the reference in bfloat16 and float16, within their precision":
        "bfloat16 和 float16 下，在其精度范围内与参考实现一致",
    "keeps the length of every (i, i + D/2) pair: it only rotates":
        "每个维度对 (i, i + D/2) 的长度都不变：只做旋转",
    "keeps the length of every (2i, 2i+1) pair: it only rotates":
        "每个维度对 (2i, 2i+1) 的长度都不变：只做旋转",
    " (the length of each whole vector is kept, so you rotate other pairs; {pairing})":
        "（整个向量的长度没变，说明你旋转的是别的维度对；{pairing}）",
    "{what}: the length of a pair {pair} changed by up to {diff:.3g}{why}":
        "{what}：维度对 {pair} 的长度变化最多达 {diff:.3g}{why}",
    "position 0 leaves x unchanged": "位置 0 不改变 x",
    "{what}: at position 0 the output": "{what}：位置 0 处的输出",
    "the score q·k depends only on the distance m - n": "分数 q·k 只取决于距离 m - n",
    "{label} of one token [1, 1, {D}]": "{label} 对单个 token [1, 1, {D}] 的输出",
    "head_dim {D}, theta {theta:g}: q at position n + {dist} and k at n should give the same "
    "score for every n, got {scores} for n = {n0}, {n1}, {n2}, {n3}":
        "head_dim {D}，theta {theta:g}：位于 n + {dist} 的 q 与位于 n 的 k，对任何 n 都应得到"
        "相同的分数，但 n = {n0}、{n1}、{n2}、{n3} 时得到的是 {scores}",
    "{n} (q, k) pairs, 4 shifts each": "{n} 组 (q, k)，每组平移 4 次",
    "leaves x and positions unchanged": "不修改 x 和 positions",
    "{label} changed the x it was given (in place)": "{label}（原地）修改了传给它的 x",
    "{label} changed the positions it was given": "{label} 修改了传给它的 positions",
    # ch02.rope_qkv
    "rope_qkv(q [{T}, {Hq}, {D}], k and v [{T}, {Hkv}, {D}], positions {positions}, "
    "theta {theta:g})":
        "rope_qkv(q [{T}, {Hq}, {D}], k 与 v 均为 [{T}, {Hkv}, {D}], positions {positions}, "
        "theta {theta:g})",
    "{what} should return a tuple (q, k, v), got {got}":
        "{what} 应当返回元组 (q, k, v)，实际是 {got}",
    "{what}: {name} should stay {want}, got {got}": "{what}：{name} 应当保持 {want}，实际是 {got}",
    "returns (q, k, v) with their shapes and dtypes (Hq != Hkv)":
        "返回 (q, k, v)，形状和 dtype 不变（Hq != Hkv）",
    "q and k are rotated at their positions, like minimodel.ops":
        "q 和 k 按各自的位置旋转，与 minimodel.ops 一致",
    "{what}: {name} came back unrotated; RoPE turns both q and k":
        "{what}：{name} 没有旋转就返回了；RoPE 要同时旋转 q 和 k",
    "v comes back unchanged: values carry content, not position":
        "v 原样返回：值携带的是内容，而不是位置",
    "{what}: v should come back exactly as it was given; RoPE rotates q and k only, so that "
    "scores depend on distance while the values that get mixed stay the same at every position":
        "{what}：v 应当原样返回；RoPE 只旋转 q 和 k，这样分数取决于距离，而被混合的值在每个位置"
        "上都保持不变",
    # ch02.interleave_permutation
    "interleave_permutation(weights of Hq={Hq}, Hkv={Hkv}, C={C}, head_dim={D})":
        "interleave_permutation(Hq={Hq}, Hkv={Hkv}, C={C}, head_dim={D} 的权重)",
    "{what} should return a dict of weights, got {got}":
        "{what} 应当返回一个权重字典，实际是 {got}",
    "{what}: the result lacks {missing}; return every weight of the layer, changed or not":
        "{what}：结果中缺少 {missing}；无论改没改，这一层的每个权重都要返回",
    "; q_proj and k_proj came back as they were: interleaved RoPE pairs up other "
    "dimensions than rotate-half does, so unmoved rows no longer meet their partners":
        "；q_proj 和 k_proj 原样返回了：交错 RoPE 配成一对旋转的维度与 rotate-half 不同，行不"
        "重排的话，每一行就碰不到与它配对的那一行",
    "; {a}_proj.weight came back as it was while {b}_proj's rows moved: a score multiplies "
    "dimension j of q with dimension j of k, so both need the same reordering":
        "；{a}_proj.weight 原样返回了，{b}_proj 的行却移动了：分数是 q 的第 j 维与 k 的第 j 维"
        "相乘，所以两者需要同样的重排",
    "; {a}_norm.weight stayed where it was while the rows of {a}_proj moved: each of its D "
    "weights scales one dimension of a head, so it belongs with that dimension":
        "；{a}_proj 的行移动了，{a}_norm.weight 却留在原处：它的 D 个权重各自缩放头的一个维度，"
        "所以要跟着那个维度走",
    "; every pair turns the opposite way (the scores are rotate-half's at minus the positions): "
    "within each pair the two dimensions sit in swapped order":
        "；每一对都朝相反的方向旋转（分数等于 rotate-half 在负位置上的分数）：每对中两个维度的"
        "先后顺序放反了",
    "; it is right with one head and wrong with several: each head is D rows of its own, and "
    "the reordering happens inside every head":
        "；只有一个头时是对的，有多个头时就错了：每个头各占自己的 D 行，重排发生在每个头的内部",
    "; the reordering does not bring the two dimensions of each rotate-half pair (i, i + D/2) "
    "to where interleaved RoPE turns them together, at frequency f_i":
        "；这个重排没有把 rotate-half 的每个维度对 (i, i + D/2) 挪到交错 RoPE 以频率 f_i "
        "一起旋转的那两个位置上",
    "; v_proj's rows moved but o_proj's columns did not, so o_proj reads every value dimension "
    "from the wrong place (and RoPE never touches v)":
        "；v_proj 的行移动了，o_proj 的列却没有动，于是 o_proj 从错误的位置读取每个值维度（而且"
        " RoPE 根本不作用于 v）",
    "; o_proj's columns moved but v_proj's rows did not, so o_proj reads every value dimension "
    "from the wrong place (and RoPE never touches v)":
        "；o_proj 的列移动了，v_proj 的行却没有动，于是 o_proj 从错误的位置读取每个值维度（而且"
        " RoPE 根本不作用于 v）",
    "; v_proj and o_proj no longer fit together: column j of o_proj reads value dim j":
        "；v_proj 和 o_proj 对不上了：o_proj 的第 j 列读取的是值的第 j 维",
    "returns the six weights of the layer with their shapes and dtypes":
        "返回这一层的六个权重，形状和 dtype 不变",
    "{n} layers": "{n} 层",
    "with interleaved RoPE, every q·k score equals rotate-half's (head dims 2 to 128, GQA)":
        "用交错 RoPE 时，每个 q·k 分数都与 rotate-half 的相同（头维度 2 到 128，GQA）",
    "{what}, positions {positions}, theta {theta:g}: the scores of the converted layer with "
    "interleaved RoPE differ from the original's with rotate-half by up to {worst:.3g}{hint}":
        "{what}，位置 {positions}，theta {theta:g}：转换后的层用交错 RoPE 算出的分数，与原来的层"
        "用 rotate-half 算出的相差最多 {worst:.3g}{hint}",
    "{n} layers, float32 and bfloat16 weights": "{n} 层，权重为 float32 和 bfloat16",
    "with interleaved RoPE, the layer's output equals rotate-half's":
        "用交错 RoPE 时，层的输出与 rotate-half 的相同",
    "{what}, positions {positions}, theta {theta:g}: the output of the converted layer differs "
    "from the original's by up to {worst:.3g}{hint}":
        "{what}，位置 {positions}，theta {theta:g}：转换后的层的输出与原来的层相差最多 "
        "{worst:.3g}{hint}",
    " (its scores differ already: see the check of the scores)":
        "（它的分数就已经不同了：见分数那项检查）",
    "leaves the given weights unchanged": "不修改传入的权重",
    "interleave_permutation changed the weights it was given: {changed} (the original "
    "checkpoint must stay usable)":
        "interleave_permutation 修改了传给它的权重：{changed}（原来的检查点必须仍然可用）",
}
