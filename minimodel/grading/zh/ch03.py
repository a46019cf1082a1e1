"""The Chinese of chapter 03's check messages (minimodel/grading/ch03/)."""

MESSAGES: dict[str, str] = {
    # causal_mask.py
    "is a bool [T, T] tensor for T = 1, 2, 3, 7, 16, 33":
        "T = 1, 2, 3, 7, 16, 33 时都返回 bool 类型的 [T, T] 张量",
    "causal_mask({T}) has dtype {dtype}; it should be torch.bool (True = may attend): "
    "masked_fill and ~ treat a bool mask as a rule, while a 0/1 or -inf float mask means "
    "something else to every function that receives it.":
        "causal_mask({T}) 的 dtype 是 {dtype}，应当是 torch.bool（True = 可以关注）："
        "masked_fill 和 ~ 都把 bool 掩码当作一条规则来用，而 0/1 或 -inf 的浮点掩码，"
        "在每个接收它的函数眼里含义都各不相同。",
    "lets every token attend to itself (the diagonal is True)":
        "每个 token 都可以关注它自己（对角线为 True）",
    "causal_mask({T})[{t}, {t}] is False: query {t} may not read its own key. The diagonal must "
    "be True: a token may read itself, and the first token has nothing else to read.":
        "causal_mask({T})[{t}, {t}] 为 False：查询 {t} 读不到它自己的键。对角线必须为 True："
        "token 可以读取它自己，而第一个 token 除了自己没有别的可读。",
    "never lets a query see a later key (above the diagonal is False)":
        "查询永远看不到更靠后的键（对角线以上为 False）",
    " It looks transposed: rows are queries t, columns are keys s, and query t may read keys "
    "s <= t (the lower triangle).":
        "看起来是转置了：行对应查询 t，列对应键 s，查询 t 可以读取 s <= t 的键（下三角）。",
    "causal_mask({T})[{t}, {s}] is True: query {t} could read the later token {s}.{hint}":
        "causal_mask({T})[{t}, {s}] 为 True：查询 {t} 能读到更靠后的 token {s}。{hint}",
    "lets every query see all earlier keys (below the diagonal is True)":
        "每个查询都能看到它之前的所有键（对角线以下为 True）",
    "causal_mask({T})[{t}, {s}] is False: query {t} should see the earlier token {s}. A causal "
    "mask hides only the future.":
        "causal_mask({T})[{t}, {s}] 为 False：查询 {t} 应当看得到更早的 token {s}。"
        "因果掩码只遮住未来。",
    # sliding_window.py
    "sliding_window_mask({T}, {window}) has dtype {dtype}; it should be torch.bool (True = may "
    "attend), like causal_mask.":
        "sliding_window_mask({T}, {window}) 的 dtype 是 {dtype}，应当和 causal_mask 一样是 "
        "torch.bool（True = 可以关注）。",
    "{where} is {value}: query {t} could read the later token {s}. A sliding window is still "
    "causal: it hides the future and the far past.":
        "{where} 为 {value}：查询 {t} 能读到更靠后的 token {s}。滑动窗口仍然是因果的："
        "它既遮住未来，也遮住久远的过去。",
    " Every query reads up to window + 1 = {n} keys; the window counts the query itself.":
        "每个查询最多读取了 window + 1 = {n} 个键；窗口大小已经把查询自身算在内了。",
    " Every query reads up to window - 1 = {n} keys; the window counts the query itself too.":
        "每个查询最多只读取了 window - 1 = {n} 个键；窗口大小同样要把查询自身算进去。",
    " It is the plain causal mask: the window is ignored.":
        "这就是普通的因果掩码：窗口被忽略了。",
    "{where} is {value}: query {t} reads {n} keys, expected the {expected} keys {first}..{t}."
    "{hint}":
        "{where} 为 {value}：查询 {t} 读取了 {n} 个键，应当读取 {first}..{t} 这 {expected} "
        "个键。{hint}",
    "is a bool [T, T] tensor for T from 1 to 33, windows 1 to 9":
        "T 从 1 到 33、窗口从 1 到 9 时都返回 bool 类型的 [T, T] 张量",
    "query t reads exactly keys t-window+1 .. t (itself and the window-1 before it)":
        "查询 t 恰好读取键 t-window+1 .. t（它自己和它前面的 window-1 个）",
    "window 1 is the diagonal; a window of T or more is the causal mask":
        "窗口为 1 时是对角线；窗口大于等于 T 时就是因果掩码",
    "sliding_window_mask({T}, 1) should be the diagonal only: with a window of one token, "
    "every token reads just itself.":
        "sliding_window_mask({T}, 1) 应当只有对角线为 True：窗口只有一个 token 时，"
        "每个 token 只读取它自己。",
    "raises ValueError for a window below 1": "窗口小于 1 时抛出 ValueError",
    "all False": "全为 False 的掩码",
    "a mask": "一个掩码",
    "sliding_window_mask(6, {window}) returned {what}. A window below 1 leaves every query with "
    "no key to read (a softmax over -inf only gives NaN): raise a ValueError that says the "
    "window must be at least 1.":
        "sliding_window_mask(6, {window}) 返回了 {what}。窗口小于 1 会让每个查询都无键可读"
        "（只对 -inf 做 softmax 会得到 NaN）：应当抛出 ValueError，并说明窗口至少为 1。",
    # repeat_kv.py
    "returns [B, Hkv*groups, S, D] for MHA, GQA and MQA shapes":
        "对 MHA、GQA 和 MQA 的形状都返回 [B, Hkv*groups, S, D]",
    "repeat_kv(x of shape {shape}, {groups})": "repeat_kv(形状为 {shape} 的 x, {groups})",
    "query head h reads KV head h // groups (order 0,0,..,1,1,..)":
        "查询头 h 读取 KV 头 h // groups（顺序为 0,0,..,1,1,..）",
    " Your heads are in the order 0,1,..,0,1,.. (the whole stack tiled); query heads come in "
    "consecutive groups, so each KV head must be copied `groups` times in place: 0,0,..,1,1,..":
        "你的头的顺序是 0,1,..,0,1,..（把整叠头整体平铺了）；查询头是按相邻顺序分组的，"
        "所以每个 KV 头都必须在原位连续复制 `groups` 次：0,0,..,1,1,..",
    " Head h must be an exact copy of x[:, h // groups].":
        "第 h 个头必须与 x[:, h // groups] 完全相同。",
    "with Hkv={Hkv}, groups={groups}: output head {h} is not KV head {kv}.{hint}":
        "Hkv={Hkv}、groups={groups} 时：输出的第 {h} 个头不是 KV 头 {kv}。{hint}",
    "keeps the dtype (float32, bfloat16, float16) and leaves x unchanged":
        "保持 dtype（float32、bfloat16、float16）不变，且不修改 x",
    "repeat_kv on {dtype} returned {got}; keep x's dtype.":
        "repeat_kv 在 {dtype} 输入上返回了 {got}；应当保持 x 的 dtype。",
    "repeat_kv changed its input x; return a new tensor.":
        "repeat_kv 修改了输入 x；应当返回一个新张量。",
    "repeat_kv on {dtype} changed the values.": "repeat_kv 在 {dtype} 输入上改变了数值。",
    # attention.py
    " Your output contains NaN: some query had every key masked, so its softmax ran over -inf "
    "only. Is the mask inverted? True means 'may attend'.":
        "你的输出里有 NaN：某个查询的所有键都被遮住了，它的 softmax 只在 -inf 上计算。"
        "掩码是不是反了？True 表示“可以关注”。",
    " It matches attention without scaling: multiply the scores by 1/sqrt(D).":
        "它与不做缩放的注意力一致：分数要乘以 1/sqrt(D)。",
    " It matches scores scaled by 1/D; the scale is 1/sqrt(D).":
        "它与按 1/D 缩放的分数一致；缩放系数应为 1/sqrt(D)。",
    " It matches scores multiplied by sqrt(D); divide by sqrt(D) instead.":
        "它与乘以 sqrt(D) 的分数一致；应当改为除以 sqrt(D)。",
    " It matches the transposed mask: mask[t, s] says whether query t reads key s.":
        "它与转置后的掩码一致：mask[t, s] 表示查询 t 能否读取键 s。",
    " It matches the inverted mask: True means 'may attend', so the scores that become -inf "
    "are those where the mask is False.":
        "它与取反后的掩码一致：True 表示“可以关注”，所以要变成 -inf 的是掩码为 False "
        "处的分数。",
    " It matches attention with no mask at all: apply the mask to the scores.":
        "它与完全不加掩码的注意力一致：要把掩码作用到分数上。",
    " It matches K/V heads tiled in the order 0,1,0,1: query head h reads KV head h // groups, "
    "so consecutive query heads share a KV head (0,0,1,1).":
        "它与按 0,1,0,1 顺序平铺 K/V 头的结果一致：查询头 h 读取 KV 头 h // groups，"
        "所以相邻的查询头共享同一个 KV 头（0,0,1,1）。",
    " It matches a softmax over the queries (dim -2); each query's weights over the keys must "
    "sum to 1, so take the softmax over the last dim.":
        "它与沿查询方向（dim -2）做 softmax 的结果一致；每个查询在各个键上的权重之和必须为 1，"
        "所以 softmax 要沿最后一维做。",
    "attention with {sizes}, no mask, {dtype}": "attention（{sizes}，不加掩码，{dtype}）",
    "attention with {sizes}, a mask, {dtype}": "attention（{sizes}，带掩码，{dtype}）",
    "{what} is off from softmax(q k^T / sqrt(D)) v: max abs diff {worst:.3g}.{hint}":
        "{what} 与 softmax(q k^T / sqrt(D)) v 不符：最大绝对误差 {worst:.3g}。{hint}",
    "returns [B, Hq, T, D] for MHA, GQA and MQA, with and without mask":
        "对 MHA、GQA 和 MQA，带不带掩码都返回 [B, Hq, T, D]",
    "without a mask equals softmax(q k^T / sqrt(D)) v (D = 4, 16, 64)":
        "不加掩码时等于 softmax(q k^T / sqrt(D)) v（D = 4, 16, 64）",
    "with the causal mask, query t reads only keys 0..t":
        "加上因果掩码后，查询 t 只读取键 0..t",
    "applies any Bool [T, S] mask (True = may attend), also with S != T":
        "能应用任意 Bool [T, S] 掩码（True = 可以关注），S != T 时也一样",
    "GQA/MQA: query head h reads KV head h // (Hq // Hkv)":
        "GQA/MQA：查询头 h 读取 KV 头 h // (Hq // Hkv)",
    "works in bfloat16 and float16 and returns q's dtype":
        "在 bfloat16 和 float16 下都能运行，并返回 q 的 dtype",
    "attention in {dtype}": "{dtype} 下的 attention",
    "attention on {dtype} inputs returned {got}; return q's dtype (compute in float32 if you "
    "like, then cast).":
        "attention 在 {dtype} 输入上返回了 {got}；应当返回 q 的 dtype（愿意的话可以用 float32 "
        "计算，再转换回来）。",
    # is_causal.py: the functions is_causal is tried on, quoted as a message names them
    "'identity'": "“恒等映射”",
    "'a position-wise MLP'": "“逐位置的 MLP”",
    "'cumulative mean over positions 0..t'": "“对位置 0..t 的累计平均”",
    "'cumulative max over positions 0..t'": "“对位置 0..t 的累计最大值”",
    "'shift right (position t outputs input t-1)'": "“右移（位置 t 输出输入 t-1）”",
    "'causal attention'": "“因果注意力”",
    "'a causal convolution over t-2, t-1, t'": "“作用于 t-2、t-1、t 的因果卷积”",
    "'an exponential moving average'": "“指数滑动平均”",
    "'a pre-norm block: causal attention + MLP with residuals'":
        "“前置归一化的块：因果注意力 + MLP，带残差”",
    "'causal attention whose outputs are tiny (1e-3 scale)'":
        "“输出极小（1e-3 量级）的因果注意力”",
    "'attention without a mask'": "“不加掩码的注意力”",
    "'reversed cumulative sum (position t sums inputs t..T-1)'":
        "“反向累加（位置 t 对输入 t..T-1 求和）”",
    "'shift left (position t outputs input t+1)'": "“左移（位置 t 输出输入 t+1）”",
    "'attention with the causal mask transposed'": "“因果掩码被转置的注意力”",
    "'attention whose mask is off by one (reads token t+1)'":
        "“掩码错开一位的注意力（会读取 token t+1）”",
    "'causal attention, except position 0 also reads input 1'":
        "“因果注意力，只是位置 0 还读取了输入 1”",
    "'causal attention, except every position also reads the last input'":
        "“因果注意力，只是每个位置还读取了最后一个输入”",
    "'causal attention, except position T-2 also reads input T-1'":
        "“因果注意力，只是位置 T-2 还读取了输入 T-1”",
    "'causal attention plus the input two positions ahead'":
        "“因果注意力，再加上往后两个位置的输入”",
    "'attention that is bidirectional inside blocks of 4 tokens'":
        "“在每 4 个 token 的块内双向的注意力”",
    "'causal attention plus 1e-3 times the next input'":
        "“因果注意力，再加上 1e-3 倍的下一个输入”",
    "\"causal attention plus the next input's last channel, into channel 0\"":
        "“因果注意力，再把下一个输入的最后一个通道加到通道 0 上”",
    "'causal attention plus relu(next input)'": "“因果注意力，再加上 relu(下一个输入)”",
    "'subtracting the mean over the whole sequence'": "“减去整条序列上的均值”",
    "is_causal should return True or False, got {type} {result!r} for {name}.":
        "is_causal 应当返回 True 或 False，实际对{name}返回了 {type} {result!r}。",
    "; ": "；",
    "is_causal said False for {n} causal function(s): {named}. These never read a later "
    "position; does your test compare with a tolerance that float noise can beat, or change "
    "earlier positions too?":
        "is_causal 对 {n} 个因果函数说了 False：{named}。这些函数从不读取更靠后的位置；"
        "你的测试是不是用了一个浮点噪声就能超出的容差，或者把更早的位置也改了？",
    "is_causal said True for {n} leaky function(s): {named}. Each lets some output read a "
    "later input: change the inputs after every position t (not only one), and compare "
    "outputs before t exactly (or with a tolerance far below 1e-3).":
        "is_causal 对 {n} 个泄漏未来信息的函数说了 True：{named}。它们都会让某个输出读到更靠后"
        "的输入：对每一个位置 t（而不是只挑一个），改变 t 及其之后的输入，再精确比较 t 之前的"
        "输出（或者用远小于 1e-3 的容差）。",
    "says True for 10 causal functions (masked attention, means, ...)":
        "对 10 个因果函数（带掩码的注意力、均值……）都说 True",
    "says False for clear leaks (no mask, transposed or off-by-one mask)":
        "对明显的泄漏（不加掩码、掩码转置或错开一位）说 False",
    "says False for leaks at one place (first, last, second-last, ...)":
        "对只在一处发生的泄漏（第一个、最后一个、倒数第二个……）说 False",
    "says False for subtle leaks (1e-3 in size, one channel, relu)":
        "对隐蔽的泄漏（大小只有 1e-3、只经过一个通道、经过 relu）说 False",
    # predict_shapes.py
    "token ids are [B, T].": "token ID 是 [B, T]。",
    "one C-vector per token: [B, T, C].": "每个 token 一个 C 维向量：[B, T, C]。",
    "q is [B, Hq, T, D]; D is the given head_dim, which need not be C // Hq.":
        "q 是 [B, Hq, T, D]；D 是给定的 head_dim，不一定等于 C // Hq。",
    "K has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D].":
        "K 只有 Hkv 个头（GQA：每 Hq // Hkv 个查询头共享一个）：[B, Hkv, T, D]。",
    "V has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D].":
        "V 只有 Hkv 个头（GQA：每 Hq // Hkv 个查询头共享一个）：[B, Hkv, T, D]。",
    "one score per query and key in every query head: [B, Hq, T, T].":
        "每个查询头里，每对查询和键各有一个分数：[B, Hq, T, T]。",
    "o_proj maps the Hq * D head outputs back to the hidden size: [B, T, C].":
        "o_proj 把 Hq * D 个头输出映射回隐藏维度：[B, T, C]。",
    "V scores at every position: [B, T, V].": "每个位置上有 V 个分数：[B, T, V]。",
    "only the last position predicts the next token: [B, V].":
        "只有最后一个位置预测下一个 token：[B, V]。",
    "a tuple of ints (a shape), got a tensor of shape {shape}.":
        "由整数组成的元组（即形状），实际是一个形状为 {shape} 的张量。",
    "a tuple of ints, got {value!r}.": "由整数组成的元组，实际是 {value!r}。",
    "{where} should return a dict, got {type}.": "{where} 应当返回 dict，实际是 {type}。",
    "{where} is missing the key(s) {missing}{listing}.": "{where} 缺少键 {missing}{listing}。",
    "{where}[{key!r}] should be {want}": "{where}[{key!r}] 应当是{want}",
    "{where}[{key!r}] is {shape}, expected {want}: {hint}":
        "{where}[{key!r}] 是 {shape}，应为 {want}：{hint}",
    "returns a dict with all nine keys, each a tuple of ints":
        "返回包含全部九个键的 dict，每个值都是由整数组成的元组",
    "; expected {keys}": "；应包含 {keys}",
    "gets the pen-and-paper example's config as a batch of 2 prompts of 5 tokens (C=32, Hq=4, "
    "Hkv=2, D=8, V=64)":
        "纸上推演那个例子的配置，换成 2 条各 5 个 token 的提示词组成的 batch，形状全部正确"
        "（C=32, Hq=4, Hkv=2, D=8, V=64）",
    "gets every shape right for 12 configs you have not seen":
        "在 12 个你没见过的配置上，每个形状都正确",
}
