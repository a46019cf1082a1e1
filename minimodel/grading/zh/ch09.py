"""The Chinese of chapter 09's check messages (minimodel/grading/ch09/)."""

MESSAGES: dict[str, str] = {
    # shared by the kernels' checks (common.py)
    "{what} should return a tuple (o, lse), got {got}":
        "{what} 应当返回元组 (o, lse)，实际返回的是 {got}",
    "{what}: {name} should be a torch.Tensor, got {got}":
        "{what}：{name} 应当是 torch.Tensor，实际是 {got}",
    "{what} changed one of its inputs; compute into new tensors (a kernel reads q, k, v and the "
    "states, and writes only its outputs)":
        "{what} 修改了它的某个输入；请把结果写入新的张量（算子只读取 q、k、v 和状态，只写出自己的"
        "输出）",
    # ch09.online_softmax
    "{what} should return a torch.Tensor, got {got}":
        "{what} 应当返回 torch.Tensor，实际返回的是 {got}",
    " It holds inf or nan: an exp of a large logit overflowed (float32 holds up to about "
    "exp(88.7)), or 0/0 came from exps that all underflowed. Every exp should see a logit minus a "
    "max that is at least as large.":
        "结果中有 inf 或 nan：某个大 logit 的 exp 溢出了（float32 最大只能表示约 exp(88.7)），或者"
        "所有 exp 都下溢成了 0，得出 0/0。每个 exp 的参数都应当是 logit 减去一个不小于它的最大值。",
    " Its rows sum to {low:.3g}..{high:.3g}, not 1: the running sum must end as the sum over the "
    "whole row, in the same units (the same max) as the numerators it divides.":
        "各行之和为 {low:.3g}..{high:.3g}，而不是 1：运行和最终必须是整行的和，并且与它所除的分子"
        "处在同一基准下（同一个最大值）。",
    " The rows sum to 1 but the values are wrong: when a block raises the running max, what was "
    "summed under the old max has to be brought to the new one.":
        "各行之和为 1，但数值不对：某一块抬高了运行最大值时，在旧最大值下累加的部分必须重新缩放到"
        "新最大值下。",
    "{what} is off from x.softmax(-1) by up to {worst:.3g}.{hint}":
        "{what} 与 x.softmax(-1) 相差最多 {worst:.3g}。{hint}",
    "returns x's shape, equal to x.softmax(-1) for 1-D, 2-D and 3-D inputs":
        "返回与 x 相同的形状，对 1 维、2 维和 3 维输入都等于 x.softmax(-1)",
    "any block size: 1, one that divides S, one that does not, and block >= S":
        "任意块大小：1、能整除 S 的、不能整除 S 的，以及 block >= S",
    "{n} (S, block) pairs": "{n} 组 (S, block)",
    "carries the max across blocks: rows that rise, fall, and jump":
        "最大值跨块延续：逐块上升、逐块下降和突然跳变的行",
    "stable on logits in the thousands, where exp(x) overflows":
        "logits 达到几千、exp(x) 会溢出时依然稳定",
    # ch09.flash_attention
    " It holds inf or nan: an exp overflowed (scores minus a max that is not the largest so far), "
    "or a row was divided by a sum of zero.":
        "结果中有 inf 或 nan：某个 exp 溢出了（分数减去的并不是迄今为止的最大值），或者某一行除以"
        "了为零的和。",
    " The output is right; the lse is in base 2 (log2 of the sum of 2^x, as GPU kernels keep it "
    "internally). Return the natural log: the lse of torch.logsumexp over the scaled scores.":
        "输出正确，lse 却以 2 为底（2^x 之和的 log2，GPU 算子内部就是这样保存的）。请返回自然对"
        "数：对缩放后的分数做 torch.logsumexp 得到的 lse。",
    " The output is right, the lse is not: it is log(sum(exp(scaled score))) over the keys each "
    "query sees, in natural log, max included.":
        "输出正确，lse 不对：它是每个查询能看到的键上的 log(sum(exp(scaled score)))，取自然对数，"
        "减去的最大值也要加回来。",
    " It matches a top-left causal mask: query t is token S - T + t of the sequence (the queries "
    "are the last T of the S tokens), so it sees keys 0..S-T+t.":
        "它与左上对齐的因果掩码一致：查询 t 是序列中位置 S - T + t 上的 token（这些查询是 S 个 "
        "token 中的最后 T 个），所以它能看到键 0..S-T+t。",
    " It matches attention with no causal mask: a query must not see the keys after its own "
    "position.":
        "它与不加因果掩码的注意力一致：查询不能看到它自身位置之后的键。",
    " It matches unscaled scores: the scores are q·k / sqrt(D).":
        "它与未缩放的分数一致：分数应为 q·k / sqrt(D)。",
    " It matches scores scaled by 1/D; the scale is 1/sqrt(D).":
        "它与按 1/D 缩放的分数一致；缩放系数应为 1/sqrt(D)。",
    " It matches query head h reading KV head h % Hkv; the G = Hq / Hkv heads of a group are "
    "neighbours, so head h reads KV head h // G.":
        "它与查询头 h 读取 KV 头 h % Hkv 的结果一致；同一组的 G = Hq / Hkv 个头是相邻的，所以头 h "
        "读取 KV 头 h // G。",
    " A rescaling slip gives this kind of error: whenever a tile raises a row's running max, both "
    "the running sum and the accumulated output must be brought to the new max, and the max must "
    "carry over from one key tile to the next.":
        "这类误差通常出在重新缩放上：每当某个分块抬高了一行的运行最大值，运行和与累加的输出都必须"
        "换算到新的最大值下，而且最大值必须从一个键分块延续到下一个。",
    "flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}], causal={causal}, "
    "block_q={block_q}, block_k={block_k})":
        "flash_attention(q [{T}, {Hq}, {D}], k 和 v 均为 [{S}, {Hkv}, {D}], causal={causal}, "
        "block_q={block_q}, block_k={block_k})",
    "{what}: o": "{what} 的 o",
    "{what}: lse (one per query and head)": "{what} 的 lse（每个查询、每个头一个）",
    "{what}: {which} is off by up to {worst:.3g} from scaled_dot_product_attention (float64, "
    "tolerance {tol:g}).{hint}":
        "{what}：{which} 与 scaled_dot_product_attention（float64，容差 {tol:g}）相差最多 "
        "{worst:.3g}。{hint}",
    "returns (o [T, Hq, D], lse [T, Hq]); non-causal equals SDPA within 1e-5":
        "返回 (o [T, Hq, D], lse [T, Hq])；非因果时与 SDPA 相差不超过 1e-5",
    "prefill (T = S, causal) at several tile sizes, including tiles that do not divide T and "
    "tiles larger than T":
        "多种分块大小下的预填充（T = S，因果）：包括不能整除 T 的分块和比 T 还大的分块",
    "T = {T}, tiles {tiles}": "T = {T}，分块 {tiles}",
    "chunked prefill (T < S): the causal mask is bottom-right":
        "分块预填充（T < S）：因果掩码右下对齐",
    "decode (T = 1): one query sees every key, causal or not":
        "解码（T = 1）：无论是否因果，唯一的查询都能看到所有键",
    "GQA and MQA: the G query heads of a group share one K/V tile (head h reads KV head h // G)":
        "GQA 和 MQA：同一组的 G 个查询头共享一个 K/V 分块（头 h 读取 KV 头 h // G）",
    "lse is the natural-log log-sum-exp of the scaled scores":
        "lse 是缩放后分数的 log-sum-exp，取自然对数",
    "rescales across key tiles: keys whose scores rise from tile to tile, and scores in the "
    "hundreds (where exp overflows)":
        "跨键分块重新缩放：分数逐块上升的键，以及达到几百的分数（此时 exp 会溢出）",
    "rising": "逐块上升",
    "huge": "高达几百",
    "flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}] with {kind} scores, "
    "causal={causal}, block_q=2, block_k={bk})":
        "flash_attention(q [{T}, {Hq}, {D}], k 和 v 均为 [{S}, {Hkv}, {D}] 且分数{kind}, "
        "causal={causal}, block_q=2, block_k={bk})",
    "{what}: lse": "{what} 的 lse",
    "{what}: off by up to {worst:.3g} from scaled_dot_product_attention (float64).{hint}":
        "{what}：与 scaled_dot_product_attention（float64）相差最多 {worst:.3g}。{hint}",
    "works tile by tile: no matrix product as large as a head's [T, S] scores (causal prefill, T "
    "= S = 64, tiles 4 x 8)":
        "逐个分块计算：任何矩阵乘的结果都不能与一个头完整的 [T, S] 分数一样大（因果预填充，T = S "
        "= 64，分块 4 x 8）",
    "{what} ran a matrix product with {largest} outputs; one head's whole score matrix has {whole}"
    ", a tile {tile} per query head. A FlashAttention kernel only ever holds a tile of scores: "
    "loop over query tiles and, inside, over key tiles, folding each score tile into the running "
    "max, sum and output.":
        "{what} 执行了一次输出有 {largest} 个元素的矩阵乘；一个头完整的分数矩阵有 {whole} 个元素，"
        "每个查询头的一个分块只有 {tile} 个。FlashAttention 算子任何时候都只持有一个分块的分数：外"
        "层循环遍历查询分块，内层循环遍历键分块，把每个分数分块折叠进运行最大值、运行和与运行输"
        "出。",
    "score and output products: {share:.0%} of the full matrix's FLOPs":
        "分数与输出的矩阵乘：完整矩阵 FLOPs 的 {share:.0%}",
    # ch09.merge_states
    " It holds inf or nan: exp(lse) overflows float32 above about 88.7 (and underflows to 0 below "
    "about -103, so 0/0). Only differences of lse values should meet an exp, taken against the "
    "larger of the two.":
        "结果中有 inf 或 nan：lse 超过约 88.7 时，exp(lse) 会超出 float32 的范围（低于约 -103 时又"
        "会下溢为 0，于是得出 0/0）。只应对 lse 之差取 exp，并以两者中较大的那个为基准。",
    " The lse matches a base-2 merge (log2 of 2^a + 2^b). The states here hold natural logs: "
    "merge with exp and log.":
        "lse 与以 2 为底的合并一致（2^a + 2^b 的 log2）。这里的状态保存的是自然对数：请用 exp 和 "
        "log 合并。",
    " The output is the plain average of the two: each side counts in proportion to its share of "
    "the total exp-sum, which its lse gives.":
        "输出是两者的简单平均：每一侧的权重应当是它在 exp 总和中所占的比例，这个比例由它的 lse 给"
        "出。",
    " The lse is the larger of the two; the merged lse is the log of the sum of both exp-sums, a "
    "little above the larger one.":
        "lse 取了两者中较大的那个；合并后的 lse 是两侧 exp 之和相加后的对数，比较大的那个略大一"
        "些。",
    " The lse is the sum of the two; the exp-sums add, so their logs do not.":
        "lse 是两者之和；相加的是 exp 之和，它们的对数并不相加。",
    "{what} is off by up to {worst:.3g} from the state over both key sets.{hint}":
        "{what} 与两个键集并集上的状态相差最多 {worst:.3g}。{hint}",
    "the states of two parts of the keys merge into the state of all of them (SDPA over the whole)":
        "键的两个部分上的状态合并为全部键上的状态（即在整体上做 SDPA）",
    "merge_states of attention over keys 0..{end_a} and {cut}..{end} (o [{T}, {Hq}, {D}])":
        "对键 0..{end_a} 和 {cut}..{end} 上的注意力（o [{T}, {Hq}, {D}]）做 merge_states",
    "{what} is off by up to {worst:.3g} from attention over all {S} keys.{hint}":
        "{what} 与在全部 {S} 个键上做的注意力相差最多 {worst:.3g}。{hint}",
    "5 random cuts": "5 种随机切分",
    "stable for lse values in the thousands (and far below zero)":
        "lse 达到几千（以及远低于零）时依然稳定",
    "merge_states with lse values around {center:g}": "lse 在 {center:g} 附近时的 merge_states",
    "one side far larger: the merge is that side; an empty side (lse = -inf) changes nothing":
        "一侧远大于另一侧：合并结果就是那一侧；空的一侧（lse = -inf）不改变任何东西",
    "merge_states with lse_a 200 above lse_b": "lse_a 比 lse_b 大 200 时的 merge_states",
    "merge_states with an empty second state (o_b = 0, lse_b = -inf)":
        "第二个状态为空（o_b = 0，lse_b = -inf）时的 merge_states",
    "merge_states with an empty first state (o_a = 0, lse_a = -inf)":
        "第一个状态为空（o_a = 0，lse_a = -inf）时的 merge_states",
    "order does not matter: merge(a, b) = merge(b, a), and three chunks merge the same either way":
        "与顺序无关：merge(a, b) = merge(b, a)，三段无论按哪种顺序合并，结果都一样",
    "{name} over three chunks of 24 keys is off by up to {worst:.3g} from attention over all of "
    "them":
        "在 24 个键分成的三段上，{name} 与在全部键上做的注意力相差最多 {worst:.3g}",
    "bfloat16 outputs with float32 lse (FlashInfer's attention states) and float64":
        "bfloat16 的输出搭配 float32 的 lse（FlashInfer 的注意力状态），以及 float64",
    "merge_states with bfloat16 o and float32 lse":
        "o 为 bfloat16、lse 为 float32 时的 merge_states",
    "merge_states in float64": "float64 下的 merge_states",
    # ch09.paged_split_kv_decode: its output (paged.py)
    "paged_split_kv_decode(q [{B}, {Hq}, {D}], pool with page_size {S}, kv_lens {kv_lens}, "
    "num_work_items={num_work_items})":
        "paged_split_kv_decode(q [{B}, {Hq}, {D}], 页大小为 {S} 的缓存池, kv_lens {kv_lens}, "
        "num_work_items={num_work_items})",
    "{what}: o (one output per request and head)": "{what} 的 o（每个请求、每个头一个输出）",
    " It holds inf or nan.": "结果中有 inf 或 nan。",
    " The output is right; the lse is in base 2. Return the natural log.":
        "输出正确，lse 却以 2 为底。请返回自然对数。",
    " It matches reading every slot of each request's last page: only kv_last_page_len of them "
    "hold tokens; the rest are whatever the pool held before (here: large garbage).":
        "它与读取每个请求最后一页全部槽位的结果一致：其中只有 kv_last_page_len 个槽位存有 token，"
        "其余的是缓存池之前留下的任意内容（这里是很大的垃圾值）。",
    " Only request 0 is wrong.": "只有请求 0 是错的。",
    " Request 0 is right and a later one is not: request b's pages are "
    "kv_indices[kv_indptr[b]:kv_indptr[b+1]].":
        "请求 0 正确，后面的请求却不对：请求 b 的页是 kv_indices[kv_indptr[b]:kv_indptr[b+1]]。",
    "{what} is off by up to {worst:.3g} from the engine's torch backend (o) and a float64 "
    "reference (lse).{hint}":
        "{what} 与引擎的 torch 后端（o）和 float64 参考结果（lse）相差最多 {worst:.3g}。{hint}",
    "returns (o [B, Hq, D], lse [B, Hq]); one request, a budget of 1 item, of a few, and of more "
    "items than it has tokens":
        "返回 (o [B, Hq, D], lse [B, Hq])；一个请求，预算分别为 1 个工作项、几个工作项，以及比它的"
        " token 还多的工作项",
    "a batch of requests of different lengths, pages scattered over the pool, page sizes 1, 3 and "
    "16: equals the engine's torch backend":
        "一批长度各异的请求，页分散在缓存池各处，页大小为 1、3 和 16：结果等于引擎的 torch 后端",
    "3 page sizes": "3 种页大小",
    "reads only each request's pages, and only kv_last_page_len slots of its last one (the others "
    "hold garbage)":
        "只读取每个请求自己的页，最后一页只读取 kv_last_page_len 个槽位（其余槽位是垃圾值）",
    "GQA and MQA: query head h reads KV head h // G": "GQA 和 MQA：查询头 h 读取 KV 头 h // G",
    # ch09.paged_split_kv_decode: its work items and merges (work_items.py)
    "paged_split_kv_decode should call your flash_attention of exercise 2, once per work item; no "
    "flash_attention is defined where it runs.":
        "paged_split_kv_decode 应当调用你在练习 2 中写的 flash_attention，每个工作项调用一次；但在"
        "它运行的地方没有定义 flash_attention。",
    "{what} made no call of your flash_attention (exercise 2): each work item is one call, over "
    "one chunk of one request's keys.":
        "{what} 一次也没有调用你的 flash_attention（练习 2）：每个工作项就是一次调用，作用于某一个"
        "请求的一段键。",
    "{what}: call {call} of your flash_attention got keys that are not tokens of the batch as the "
    "pool holds them (each work item's k is a run of one request's K, gathered through its pages, "
    "unchanged).":
        "{what}：你的 flash_attention 的第 {call} 次调用拿到的键，并不是缓存池中所存的这批 token（"
        "每个工作项的 k 是某一个请求的一段 K，经由它的页收集而来，原样不变）。",
    "{what}: call {call} of your flash_attention mixes the keys of requests {requests}; a work "
    "item attends one request's query over that request's keys.":
        "{what}：你的 flash_attention 的第 {call} 次调用混入了请求 {requests} 的键；一个工作项只拿"
        "一个请求的查询，对这个请求自己的键做注意力。",
    "{what}: call {call} of your flash_attention reads positions {positions}{more} of request {b}"
    ": not one contiguous run. A work item streams one contiguous chunk of a request's keys, as a "
    "thread block does.":
        "{what}：你的 flash_attention 的第 {call} 次调用读取了请求 {b} 的位置 {positions}{more}，"
        "不是连续的一段。一个工作项流式读取一个请求中连续的一段键，就像一个线程块那样。",
    "read token(s) {tokens} more than once": "把 token {tokens} 读了不止一次",
    "miss token(s) {tokens}": "漏掉了 token {tokens}",
    "{what}: request {b}'s chunks {problem}: every token belongs to exactly one chunk.":
        "{what}：请求 {b} 的各段{problem}：每个 token 都应当恰好属于一段。",
    "kv_lens {kv_lens} in pages of {page_size}, num_work_items={budget}":
        "kv_lens {kv_lens}，页大小 {page_size}，num_work_items={budget}",
    "{what}: your flash_attention ran {runs} times, over the budget of {budget} work items (the "
    "blocks a GPU runs at once). Cut fewer, longer chunks.":
        "{what}：你的 flash_attention 运行了 {runs} 次，超出了 {budget} 个工作项的预算（即 GPU 能"
        "同时运行的线程块数）。请切成更少、更长的段。",
    " Your chunks all start on a page boundary: a chunk may start and end inside a page.":
        "你的段都从页边界开始：段可以在页的中间开始和结束。",
    "{what}: your longest work item has {longest} tokens, and the step waits for it; the batch "
    "can be cut into at most {budget} chunks none longer than {best} tokens. Choose the chunks "
    "from all the requests' lengths together.{hint}":
        "{what}：你最长的工作项有 {longest} 个 token，整步都要等它；而这批请求可以切成至多 "
        "{budget} 段，且每段都不超过 {best} 个 token。请综合所有请求的长度来决定如何切分。{hint}",
    "{items} items, longest {longest}": "{items} 个工作项，最长 {longest}",
    "work items: at most num_work_items calls of your flash_attention, each one contiguous run of "
    "one request's tokens, the longest as short as the budget allows (chunks cut inside pages)":
        "工作项：至多调用 num_work_items 次你的 flash_attention，每次作用于一个请求中连续的一段 "
        "token，最长的一段在预算允许的范围内尽可能短（段可以在页中间切开）",
    "; ": "；",
    "merges the chunks' states with your merge_states": "用你的 merge_states 合并各段的状态",
    "Calls seen: {calls}.": "检测到的调用：{calls}。",
    "Calls seen: none.": "检测到的调用：无。",
    "kv_lens {kv_lens}, num_work_items={budget}: a balanced cut has at least {chunks} chunks for "
    "{requests} requests, so at least {need} merges, and your merge_states was called {merges} "
    "times. Compute each chunk's state on its own and combine them with the merge_states you wrote "
    "in exercise 3 (a GPU runs the chunks in parallel, so no chunk can see another's running max). "
    "{seen}":
        "kv_lens {kv_lens}，num_work_items={budget}：均衡的切分至少把 {requests} 个请求切成 "
        "{chunks} 段，所以至少要合并 {need} 次，而你的 merge_states 被调用了 {merges} 次。请分别计"
        "算每一段的状态，再用你在练习 3 中写的 merge_states 把它们合并（GPU 并行运行各段，所以任何"
        "一段都看不到其他段的运行最大值）。{seen}",
    "{chunks} chunks, {merges} merges": "{chunks} 段，{merges} 次合并",
    # ch09.predict_step_seconds
    " It reads the weights once per request; a step reads each weight once and multiplies it by "
    "all B rows, which is what batching buys.":
        "它为每个请求各读了一次权重；一步只把每个权重读一次，再用它乘以全部 B 行，这正是批处理带来"
        "的好处。",
    " It leaves out the K/V cache: each request reads the K and V of its kv_len tokens in every "
    "layer.":
        "它漏掉了 K/V 缓存：每个请求在每一层都要读取它那 kv_len 个 token 的 K 和 V。",
    " Its K/V bytes are one layer's: every one of the L layers reads its own K and V.":
        "它的 K/V 字节数只是一层的：L 层中的每一层都要读取自己的 K 和 V。",
    " Its K/V bytes count K or V, not both.": "它的 K/V 字节数只算了 K 或 V，没有把两者都算上。",
    " It adds the memory time and the compute time; on the roofline a step takes the larger of "
    "the two (the reads and the arithmetic overlap).":
        "它把访存时间和计算时间相加了；在屋顶线上，一步的耗时是两者中较大的那个（读取和计算是重叠"
        "进行的）。",
    " It is the memory time alone; where FLOPs / peak is larger, the compute roof is the bound.":
        "它只算了访存时间；当 FLOPs / peak 更大时，起决定作用的是计算屋顶。",
    " It leaves out attention's FLOPs, 4·Hq·D per cached token per layer per request.":
        "它漏掉了注意力的 FLOPs：每个请求、每一层、每个已缓存 token 各 4·Hq·D。",
    " It counts 1 FLOP per weight and request: a multiply and an add are 2.":
        "它按每个权重、每个请求 1 FLOP 计算：一次乘法加一次加法是 2 FLOPs。",
    " It leaves out the LM head, [V, C], the largest single matrix of a small model.":
        "它漏掉了 LM head [V, C]，这是小模型中最大的单个矩阵。",
    " It takes q and o as [C, C]; they are [Hq·D, C] and [C, Hq·D], and Hq·D need not equal C.":
        "它把 q 和 o 当成了 [C, C]；它们是 [Hq·D, C] 和 [C, Hq·D]，而 Hq·D 不一定等于 C。",
    " It is in milliseconds; return seconds.": "它的单位是毫秒；请返回秒。",
    " Its K/V are in the weights' format; quantization here is weight-only, and the K/V cache "
    "stays bfloat16.":
        "它的 K/V 用了权重的格式；这里的量化是仅权重量化，K/V 缓存仍是 bfloat16。",
    " Its LM head is bfloat16; the engine quantizes the LM head like every linear layer.":
        "它的 LM head 是 bfloat16；引擎会像量化每个线性层一样量化 LM head。",
    " It leaves out the scales: a float32 scale (4 bytes) per output row.":
        "它漏掉了缩放因子：每个输出行有一个 float32 缩放因子（4 字节）。",
    " It leaves out the scales and zero points: a bfloat16 scale and zero point (4 bytes) per "
    "group of 128 inputs of a row.":
        "它漏掉了缩放因子和零点：每行每 128 个输入为一组，每组各有一个 bfloat16 缩放因子和零点（共"
        " 4 字节）。",
    " It keeps one scale and zero point per row; int4 keeps one per group of 128 inputs of a row.":
        "它每行只算了一个缩放因子和零点；int4 是每行每 128 个输入为一组、每组各有一个。",
    " It counts only the scale of each group; each group also has a zero point.":
        "它只算了每组的缩放因子；每组还有一个零点。",
    " It takes a byte per int4 weight; two of them share a byte.":
        "它给每个 int4 权重算了一个字节；两个 int4 权重共用一个字节。",
    "{what} returned a {got}; return a number of seconds (float)":
        "{what} 返回了 {got}；应返回以秒为单位的数（float）",
    "memory-bound": "访存密集",
    "compute-bound": "计算密集",
    "{what} returned {got:.6g} s, expected {want:.6g} s ({bound}: {nbytes:.6g} bytes, {flops:.6g} "
    "FLOPs).{hint}":
        "{what} 返回了 {got:.6g} s，应为 {want:.6g} s（{bound}：{nbytes:.6g} 字节，{flops:.6g}"
        " FLOPs）。{hint}",
    "12 random configs": "12 个随机配置",
    "float32 and bfloat16 decode steps of random configs: the weights once, each request's K/V, "
    "the slower roof":
        "随机配置下 float32 和 bfloat16 的解码步：权重只读一次，加上每个请求的 K/V，取较慢的那条屋"
        "顶",
    "int8 and int4 weights: their integers with their scales (and int4's zero points), the K/V "
    "cache in bfloat16":
        "int8 和 int4 权重：整数本身加上缩放因子（int4 还有零点），K/V 缓存为 bfloat16",
    "a batch shares the weights' read: 1 to 256 requests, short and long contexts, in every format":
        "一个 batch 共享权重的读取：1 到 256 个请求，短上下文和长上下文，覆盖每种格式",
    "where FLOPs / peak is the larger, the compute roof is the bound (the larger time, not the "
    "sum)":
        "当 FLOPs / peak 更大时，起决定作用的是计算屋顶（取较大的时间，而不是两者之和）",
    "a compute-bound step ({weights}, batch 256) should take twice as long on half the peak "
    "FLOP/s; got {slow:.6g} s and {fast:.6g} s":
        "计算密集的一步（{weights}，batch 256）在峰值 FLOP/s 减半时耗时应当翻倍；实际是 {slow:.6g}"
        " s 和 {fast:.6g} s",
    "the published Qwen3 shapes, 0.6B to 8B, at batch 1 and 64 on a 50 GB/s, 1 TFLOP/s machine":
        "公开的 Qwen3 形状（0.6B 到 8B），batch 为 1 和 64，机器为 50 GB/s、1 TFLOP/s",
    "Qwen3-8B at batch 1: {bf16:.0f} ms a step in bfloat16, {int4:.0f} ms in int4":
        "Qwen3-8B 在 batch 为 1 时：bfloat16 下每步 {bf16:.0f} ms，int4 下 {int4:.0f} ms",
}
