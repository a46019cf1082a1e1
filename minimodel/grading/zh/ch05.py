"""The Chinese of chapter 05's check messages (minimodel/grading/ch05/)."""

MESSAGES: dict[str, str] = {
    # common.py
    "{what} should keep the logits' dtype {want}, got {got}":
        "{what} 应当保持 logits 的 dtype {want}，实际是 {got}",
    "{what}: a removed token should be -inf (float('-inf')), got {got:.3g}: a very negative "
    "number still leaves it a tiny probability, and -inf is what the next filter and softmax "
    "expect":
        "{what}：被移除的 token 应为 -inf（float('-inf')），实际是 {got:.3g}：很大的负数仍会给"
        "它留下一点点概率，而下一个过滤器和 softmax 要的正是 -inf",
    "{what}: the kept logits should come back unchanged (a filter only writes -inf; it does not "
    "rescale, renormalise or turn logits into probabilities)":
        "{what}：保留下来的 logits 应原样返回（过滤器只写入 -inf，不缩放、不重新归一化，也不把 "
        "logits 变成概率）",
    "kept {kept} token(s), expected {want}": "保留了 {kept} 个 token，应为 {want} 个",
    "{what} removed {n} tokens; {why}": "{what} 移除了 {n} 个 token；{why}",
    "{what} changed the logits; with {setting} they come back as they were":
        "{what} 改动了 logits；{setting} 时它们应原样返回",
    # top_k.py
    "; the k-th largest value {kth:.3g} is tied, and every token equal to it stays":
        "；第 k 大的值 {kth:.3g} 有并列，等于它的 token 都要保留",
    "; a logit equal to the k-th largest ({kth:.3g}) must stay: remove only logits strictly "
    "below it":
        "；等于第 k 大值（{kth:.3g}）的 logit 必须保留：只移除严格小于它的 logit",
    "; it used the k-th smallest logit as the threshold: count from the largest (sort in "
    "descending order)":
        "；它把第 k 小的 logit 当成了阈值：应从最大的开始数（按降序排序）",
    "{what}: row {row} {differs}; keep every logit >= the row's k-th largest and set the others "
    "to -inf{hint}":
        "{what}：第 {row} 行{differs}；要保留所有 >= 该行第 k 大值的 logit，其余都改写为 "
        "-inf{hint}",
    "keeps each row's k largest logits and writes -inf elsewhere":
        "保留每行最大的 k 个 logits，其余位置写入 -inf",
    "{n} cases, up to V = 151936": "{n} 个用例，V 最大为 151936",
    "keeps every token tied with the k-th largest": "保留与第 k 大值并列的每个 token",
    "k=0 means no filter: the logits come back unchanged": "k=0 表示不过滤：logits 原样返回",
    "k=0 means no top-k, so every logit stays": "k=0 表示不使用 top-k，所以每个 logit 都保留",
    "works in float32, float64, float16 and bfloat16":
        "在 float32、float64、float16 和 bfloat16 下都能正确工作",
    "top_k_filter(logits [3, 30] in {dtype}, k=4)":
        "{dtype} 下的 top_k_filter(logits [3, 30], k=4)",
    # top_p.py
    "could not draw logits away from p={p}": "抽不出累积概率都远离 p={p} 的 logits",
    "; {tied} tokens have the same probability as the token that crosses p, but only {kept} of "
    "them were kept: which of equal tokens survives should not depend on where a sort happened "
    "to put them, so every token as likely as the crossing token stays":
        "；有 {tied} 个 token 与越过 p 的那个 token 概率相同，但只保留了其中 {kept} 个：概率相等的 "
        "token 谁能留下，不应取决于排序碰巧把它们排在哪里，所以与越界 token 概率相同的每个 token "
        "都要保留",
    "; it dropped the token that crosses p (the one that brings the sum from {before:.3f} to "
    "{after:.3f}): that token is kept":
        "；它丢掉了越过 p 的那个 token（把累加和从 {before:.3f} 推到 {after:.3f} 的那个）：这个 "
        "token 要保留",
    "; it removed every token: the most likely token always stays":
        "；它移除了所有 token：最可能的 token 总会保留",
    "; it removed the most likely token: keep the most likely, drop the tail":
        "；它移除了最可能的 token：应保留最可能的，去掉尾部",
    "; the kept tokens hold only {mass:.3f} of the probability, less than p":
        "；保留下来的 token 只占 {mass:.3f} 的概率，不到 p",
    "{what}: row {row} {differs} (the smallest set of most likely tokens whose probabilities sum "
    "to >= p={p}, from the softmax of the row, and every token tied with the last of them){hint}":
        "{what}：第 {row} 行{differs}（应保留概率之和 >= p={p} 的最小一组最可能 token，概率由该行"
        "的 softmax 得出，再加上与其中最后一个并列的每个 token）{hint}",
    "keeps each row's smallest most-likely set with mass >= p":
        "保留每行中概率质量 >= p 的最小一组最可能 token",
    "keeps the token whose probability crosses p": "保留概率越过 p 的那个 token",
    "top_p_filter with probabilities {probs} and p={p}": "概率为 {probs}、p={p} 时的 top_p_filter",
    "{what} should keep {n} token(s), the top ones up to and including the one that crosses p, "
    "got {got}":
        "{what} 应保留 {n} 个 token，即从最可能的开始，直到越过 p 的那个（含它），实际保留了 "
        "{got} 个",
    "could not draw tied logits": "抽不出带并列值的 logits",
    "keeps every token as likely as the one that crosses p (ties)":
        "保留与越界 token 概率相同的每个 token（并列）",
    "top_p_filter(logits [{B}, {V}] in {dtype} with ties, p={p})":
        "{dtype} 下、含并列值的 top_p_filter(logits [{B}, {V}], p={p})",
    "top_p_filter with probabilities {probs} and p=0.5 kept {kept} token(s): 0.4 alone is below "
    "0.5, a 0.2 crosses it, and the other two 0.2s are just as likely, so all four stay":
        "概率为 {probs}、p=0.5 时，top_p_filter 保留了 {kept} 个 token：只有 0.4 时不到 0.5，加上"
        "一个 0.2 就越过了 p，而另外两个 0.2 的概率与它完全相同，所以四个都要保留",
    "{n} cases, up to V = 151936 in bfloat16": "{n} 个用例，bfloat16 下 V 最大为 151936",
    "always keeps at least the most likely token": "至少总会保留最可能的 token",
    "{what} kept {n} tokens per row; when the most likely token alone reaches p, it is the only "
    "one kept: the most likely token always stays, so there is always something to sample":
        "{what} 每行保留的 token 数为 {n}；最可能的 token 单独就达到 p 时，只保留它一个：最可能的 "
        "token 总会保留，所以总有东西可采样",
    "{what} removed the most likely token": "{what} 移除了最可能的 token",
    "p=1.0 means no filter: the logits come back unchanged": "p=1.0 表示不过滤：logits 原样返回",
    "p=1.0 means no top-p, so every logit stays (a float32 running sum can reach 1.0 long before "
    "the tail ends, so at p=1.0 it cannot decide what to drop)":
        "p=1.0 表示不使用 top-p，所以每个 logit 都保留（float32 的累加和可能远在尾部结束之前就到了 "
        "1.0，所以 p=1.0 时不能靠它来决定丢掉什么）",
    "works in float64, float16 and bfloat16": "在 float64、float16 和 bfloat16 下都能正确工作",
    "top_p_filter(logits [3, 6] in {dtype}, p=0.7)":
        "{dtype} 下的 top_p_filter(logits [3, 6], p=0.7)",
    # sample.py
    "{what} should have shape (1,), got a 0-d tensor: squeeze() drops every dimension of size 1, "
    "and with B=1 that includes the batch":
        "{what} 的形状应为 (1,)，实际是 0 维张量：squeeze() 会去掉所有大小为 1 的维度，B=1 时批维度"
        "也在其中",
    "{what} should be token ids of dtype torch.long (int64), got {got}":
        "{what} 应当是 dtype 为 torch.long（int64）的 token ID，实际是 {got}",
    "could not draw logits with clear top-p boundaries": "抽不出 top-p 边界清晰的 logits",
    "returns Long [B], one token id per row": "返回 Long [B]，每行一个 token ID",
    "sample returned ids {ids}, outside the vocabulary 0..{last}":
        "sample 返回的 ID {ids} 超出了词表范围 0..{last}",
    "temperature 0 is greedy: the argmax of each row, whatever top-k/p":
        "温度为 0 即贪心解码：取每行的 argmax，不管 top-k/p 是多少",
    "sample(logits [{B}, {V}] in {dtype}, temperature=0) should return the argmax of each row "
    "{want}, got {got}: temperature 0 means greedy (do not divide by 0, and do not draw)":
        "{dtype} 下的 sample(logits [{B}, {V}], temperature=0) 应当返回每行的 argmax {want}，"
        "实际是 {got}：温度为 0 就是贪心解码（不要除以 0，也不要抽样）",
    "top_k=1, or a temperature near 0, is greedy too": "top_k=1 或接近 0 的温度同样是贪心解码",
    "sample(..., temperature=1.0, top_k=1) should always return the argmax: top-k with k=1 keeps "
    "only the best token":
        "sample(..., temperature=1.0, top_k=1) 应总是返回 argmax：k=1 的 top-k 只保留最好的那个 "
        "token",
    "sample(..., temperature=0.001) should return the argmax: a tiny temperature puts almost all "
    "probability on it":
        "sample(..., temperature=0.001) 应当返回 argmax：极小的温度几乎把全部概率都压在它身上",
    "never draws a token that temperature -> top-k -> top-p removed":
        "绝不会抽到在“温度 -> top-k -> top-p”中被移除的 token",
    "with {settings} only {allowed} of the {V} tokens may be drawn, but sample drew token "
    "{token}, which was filtered out (apply temperature first, then top-k, then top-p on the "
    "probabilities of what is left)":
        "在 {settings} 下，{V} 个 token 中只有 {allowed} 个可以抽到，但 sample 抽出了 token "
        "{token}，它已被过滤掉（先应用温度，再 top-k，再在剩下的 token 的概率上做 top-p）",
    "{n} configs x {draws} draws": "{n} 组配置 × 每组抽样 {draws} 次",
    "draws with the probabilities of the filtered softmax": "按过滤后 softmax 给出的概率抽样",
    "with {settings}, the frequencies of {n} draws are {freq} but the filtered softmax is {want} "
    "(they differ by {tv:.2f} in total variation; sampling noise is below 0.05). Divide the "
    "logits by the temperature, filter, softmax over the vocabulary, then draw":
        "在 {settings} 下，{n} 次抽样的频率为 {freq}，但过滤后的 softmax 是 {want}（两者的总变差"
        "距离为 {tv:.2f}，而抽样噪声低于 0.05）。应先把 logits 除以温度，再过滤，然后在整个词表上"
        "做 softmax，最后抽样",
    "worst total variation {worst:.3f} over {n} configs":
        "{n} 组配置中最大的总变差距离为 {worst:.3f}",
    "draws from the given generator: same seed, same tokens":
        "从给定的生成器抽样：种子相同，token 就相同",
    "two calls with generators seeded alike ({settings}) returned different tokens: every random "
    "number should come from the `generator` argument, not from torch's global generator "
    "(torch's random functions draw from the global one unless they are given another)":
        "用种子相同的生成器调用两次（{settings}），返回的 token 却不同：每个随机数都应来自 "
        "`generator` 参数，而不是 torch 的全局生成器（torch 的随机函数只要没有另外给定生成器，"
        "就从全局生成器取数）",
    "generators with different seeds gave the very same 200 tokens: the draw should depend on "
    "the generator":
        "种子不同的生成器给出了完全相同的 200 个 token：抽样结果应取决于生成器",
    "two calls in a row with the same generator object gave the same 200 tokens: the generator "
    "should advance as it is used":
        "用同一个生成器对象连续调用两次，给出了相同的 200 个 token：生成器应随着使用而向前推进",
}
