"""The Chinese of chapter 07's check messages (minimodel/grading/ch07/)."""

MESSAGES: dict[str, str] = {
    # kv_bytes.py
    " That is half: both K and V are cached, so count 2 vectors per layer and KV head.":
        "这只有正确值的一半：K 和 V 都要缓存，所以每层的每个 KV 头要算 2 个向量。",
    " That is 8 times too much: dtype_bytes is already in bytes, not bits.":
        "多算成了 8 倍：dtype_bytes 的单位已经是字节，不是比特。",
    " That is twice too much: the factor is 2 (one K and one V), counted once.":
        "多算成了 2 倍：系数 2（一个 K 加一个 V）只乘一次。",
    " That is one layer's worth: every one of the L layers keeps its own K and V.":
        "这只是一层的量：L 层中的每一层都各有自己的 K 和 V。",
    " That counts numbers, not bytes: each number takes dtype_bytes bytes.":
        "这数的是数值的个数，不是字节数：每个数占 dtype_bytes 字节。",
    " head_dim counts once: a K vector of one head has D numbers.":
        "head_dim 只应乘一次：一个头的 K 向量有 D 个数。",
    "{what} returned a {type}; return a number of bytes (int)":
        "{what} 返回的是 {type}；应返回字节数（int）",
    "{what} returned {got}, expected 2·L·Hkv·D·dtype_bytes = {want}.{hint}":
        "{what} 返回了 {got}，应为 2·L·Hkv·D·dtype_bytes = {want}。{hint}",
    "equals 2·L·Hkv·D·dtype_bytes on 12 random configs":
        "在 12 个随机配置上等于 2·L·Hkv·D·dtype_bytes",
    "matches Qwen3Config.kv_bytes_per_token for Qwen3 0.6B-8B":
        "在 Qwen3 0.6B-8B 上与 Qwen3Config.kv_bytes_per_token 一致",
    "{name} in {dtype}: kv_bytes_per_token{args}": "{dtype} 下的 {name}：kv_bytes_per_token{args}",
    "Qwen3-8B in bfloat16: {kib} KiB per token": "bfloat16 下的 Qwen3-8B：每个 token {kib} KiB",
    "returns a Python int (bytes are whole numbers)": "返回 Python int（字节数是整数）",
    "kv_bytes_per_token{args} returned {got!r} of type {type}; a count of bytes is a Python int "
    "(a division or a float factor makes a float, and a tensor is not an int)":
        "kv_bytes_per_token{args} 返回了 {type} 类型的 {got!r}；字节数应是 Python int"
        "（除法或浮点系数会得到 float，张量也不是 int）",
    # paged_metadata.py
    "{what} changed its `pages` argument; leave the page tables as they are (they belong to the "
    "requests)":
        "{what} 修改了传入的 `pages` 参数；请保持页表原样（它们属于各个请求）",
    "{what} should return a tuple (kv_indptr, kv_indices, kv_last_page_len), got {got}":
        "{what} 应返回一个元组 (kv_indptr, kv_indices, kv_last_page_len)，实际是 {got}",
    "{what}: {name} should be a 1-D torch.Tensor, got {got}":
        "{what}：{name} 应是一维的 torch.Tensor，实际是 {got}",
    "{what}: {name} is {got}, expected {want}{need}.{hint}":
        "{what}：{name} 是 {got}，应为 {want}{need}。{hint}",
    "returns int32 tensors of shapes [B+1], [P], [B]":
        "返回形状分别为 [B+1]、[P]、[B] 的 int32 张量",
    "{what}: kv_indptr (a 0, then one end per request)":
        "{what}：kv_indptr（开头是一个 0，之后每个请求一个结束位置）",
    "{what}: kv_indices (every page the batch reads)":
        "{what}：kv_indices（这个 batch 要读取的每一页）",
    "{what}: kv_last_page_len (one per request)": "{what}：kv_last_page_len（每个请求一项）",
    "{what}: {name} has dtype {dtype}, expected torch.int32: FlashInfer's kernels take int32 "
    "index tensors":
        "{what}：{name} 的 dtype 是 {dtype}，应为 torch.int32：FlashInfer 的算子接受的是 int32 "
        "索引张量",
    "kv_indptr is 0, then the running total of pages per request":
        "kv_indptr 以 0 开头，之后是各请求页数的累加和",
    " It should start at 0: request i's pages are kv_indices[indptr[i]:indptr[i+1]].":
        "它应以 0 开头：请求 i 的页是 kv_indices[indptr[i]:indptr[i+1]]。",
    " It holds each request's page count; kv_indptr is cumulative: entry i+1 counts the pages of "
    "requests 0..i, so that request i's pages are kv_indices[kv_indptr[i]:kv_indptr[i+1]].":
        "它存的是每个请求各自的页数；kv_indptr 是累加的：第 i+1 项是请求 0..i 的页数之和，"
        "这样请求 i 的页才是 kv_indices[kv_indptr[i]:kv_indptr[i+1]]。",
    " It counts len // page_size pages, which leaves out a partly filled last page; that page "
    "holds tokens too.":
        "它按 len // page_size 计算页数，漏掉了没有填满的最后一页；那一页里同样有 token。",
    " (requests need {need} pages)": "（各请求需要的页数为 {need}）",
    "kv_indices lists each request's pages in order, and only the ceil(len / page_size) it needs":
        "kv_indices 按顺序列出每个请求的页，且只列出它需要的 ceil(len / page_size) 页",
    " It lists every page a request owns; a request may own more pages than its tokens fill "
    "(reserved for later), and the kernels must read only the first ceil(len / page_size) of "
    "them.":
        "它列出了请求拥有的每一页；但一个请求拥有的页可能比它的 token 填满的多（留给以后用），"
        "算子只能读取其中的前 ceil(len / page_size) 页。",
    " The pages are right but out of order: request by request, page by page.":
        "页是对的，但顺序不对：应一个请求接一个请求、一页接一页地排列。",
    "kv_last_page_len is in 1..page_size (a full page counts page_size, not 0)":
        "kv_last_page_len 在 1..page_size 之间（满页计为 page_size，不是 0）",
    " It is len % page_size, which is 0 when the last page is full; a full last page holds "
    "page_size tokens (the result must be in 1..page_size).":
        "它算的是 len % page_size，最后一页填满时会得到 0；填满的最后一页存有 page_size 个 "
        "token（结果必须在 1..page_size 之间）。",
    " A page holds at most page_size tokens.": "一页最多存 page_size 个 token。",
    "equals the engine's build_metadata on 36 random batches, page sizes 1, 3, 16":
        "在 36 个随机 batch 上与引擎的 build_metadata 一致，页大小为 1、3、16",
    "{what}: {name} is {got}, the engine builds {want}":
        "{what}：{name} 是 {got}，而引擎构建的是 {want}",
    "{n} batches": "{n} 个 batch",
    # slot_mapping.py
    "{what} changed its `pages` argument; leave the page tables alone":
        "{what} 修改了传入的 `pages` 参数；请保持页表原样",
    "{what} (one slot per new token, N = sum(q_lens))":
        "{what}（每个新 token 一个槽位，N = sum(q_lens)）",
    " These are the token positions, not slots: a slot is a place in the pool, found through the "
    "request's page table (which of its pages holds the position, and where in that page).":
        "这些是 token 的位置，不是槽位：槽位是池中的一个位置，要通过请求的页表查得"
        "（这个位置落在它的哪一页，以及在那一页中的哪个偏移处）。",
    " The new tokens were placed from position 0; they are the last q_len tokens of the "
    "sequence, positions seq_len - q_len .. seq_len - 1.":
        "新 token 被当成了从位置 0 开始；它们其实是序列的最后 q_len 个 token，"
        "位置为 seq_len - q_len .. seq_len - 1。",
    " The page id was added to the offset as if a page held one slot: the pool counts slots, and "
    "each page holds page_size of them.":
        "页号被直接加到了偏移上，就好像一页只有一个槽位：池是按槽位计数的，每页有 page_size "
        "个槽位。",
    "returns Long [N], N = sum(q_lens)": "返回 Long [N]，N = sum(q_lens)",
    "{what} has dtype {dtype}, expected torch.long: slots index the pool's rows":
        "{what} 的 dtype 是 {dtype}，应为 torch.long：槽位是池中各行的索引",
    "{what} is {got}, expected {want}.{hint}": "{what} 是 {got}，应为 {want}。{hint}",
    "prefill: every token goes to its slot through its request's page table":
        "预填充：每个 token 都通过所属请求的页表找到自己的槽位",
    "decode: the one new token is at position seq_len - 1":
        "解码：唯一的新 token 位于位置 seq_len - 1",
    "equals the engine's slot_mapping on mixed batches (chunks of any size), page sizes 1, 3, 16":
        "在混合 batch（分块大小任意）上与引擎的 slot_mapping 一致，页大小为 1、3、16",
    # cached_attention.py
    " It contains NaN: some new token had every key masked. The mask is bottom-right: token j "
    "sees keys 0..K-Q+j, so no row is empty.":
        "结果中有 NaN：某个新 token 的所有键都被掩码遮住了。掩码是右下对齐的：token j 能看到键 "
        "0..K-Q+j，所以没有哪一行是空的。",
    " It matches a top-left causal mask (tril of a [Q, K] matrix, or SDPA's is_causal=True with "
    "Q < K): new token j is the (K-Q+j)-th token, so it sees keys 0..K-Q+j.":
        "它与左上对齐的因果掩码一致（[Q, K] 矩阵的 tril，或 Q < K 时 SDPA 的 is_causal=True）："
        "第 j 个新 token 是序列中的第 K-Q+j 个 token，所以它能看到键 0..K-Q+j。",
    " It matches attention with no mask: new token j must not see the keys after its own "
    "position K-Q+j.":
        "它与不加掩码的注意力一致：第 j 个新 token 不能看到它自己的位置 K-Q+j 之后的键。",
    " It matches unscaled scores: without the 1/sqrt(D) scale the softmax is far too sharp.":
        "它与未缩放的分数一致：没有 1/sqrt(D) 的缩放，softmax 会过于尖锐。",
    " It matches scores scaled by 1/D; the scale is 1/sqrt(D).":
        "它与按 1/D 缩放的分数一致；缩放系数应为 1/sqrt(D)。",
    " It matches K/V heads repeated in the order 0,1,0,1: query head h reads KV head "
    "h // (Hq // Hkv), so neighbouring query heads share a KV head.":
        "它与按 0,1,0,1 顺序重复 K/V 头的结果一致：查询头 h 读取的是 KV 头 h // (Hq // Hkv)，"
        "所以相邻的查询头共享同一个 KV 头。",
    "cached_attention(q [{Q}, {Hq}, {D}], k and v [{K}, {Hkv}, {D}]{dtype})":
        "cached_attention(q [{Q}, {Hq}, {D}], k 和 v [{K}, {Hkv}, {D}]{dtype})",
    "{what} changed its inputs; return a new tensor": "{what} 修改了它的输入；请返回一个新张量",
    "{what} returned {got}; return q's dtype {dtype}":
        "{what} 返回了 {got}；应返回 q 的 dtype {dtype}",
    "{what} is off by up to {worst:.3g} from bottom-right causal attention.{hint}":
        "{what} 与右下对齐的因果注意力最多相差 {worst:.3g}。{hint}",
    "returns [Q, Hq, D] in q's dtype for 6 shapes":
        "在 6 种形状上都返回 [Q, Hq, D]，dtype 与 q 相同",
    "{what} returned {got}; return q's dtype": "{what} 返回了 {got}；应返回 q 的 dtype",
    "decode (Q = 1): the new token reads every cached key":
        "解码（Q = 1）：新 token 读取每一个已缓存的键",
    "prefill (Q = K): ordinary causal attention, scaled by 1/sqrt(D)":
        "预填充（Q = K）：普通的因果注意力，按 1/sqrt(D) 缩放",
    "chunked prefill (1 < Q < K): new token j reads keys 0..K-Q+j (bottom-right)":
        "分块预填充（1 < Q < K）：第 j 个新 token 读取键 0..K-Q+j（右下对齐）",
    "GQA and MQA: query head h reads KV head h // (Hq // Hkv), Hkv in {1, 2, Hq}":
        "GQA 与 MQA：查询头 h 读取 KV 头 h // (Hq // Hkv)，Hkv 取 {1, 2, Hq}",
    "works in bfloat16 and float16 and returns q's dtype":
        "在 bfloat16 和 float16 下都能运行，并返回 q 的 dtype",
    # capstone.py
    "the random config": "随机配置",
    "my_cached_decode(weights, cfg, ids [{B}, {T}], steps={steps}) on {model}":
        "my_cached_decode(weights, cfg, ids [{B}, {T}], steps={steps})（模型：{model}）",
    "{what} (the logits that picked each of the {steps} new tokens)":
        "{what}（选出这 {steps} 个新 token 的各步 logits）",
    "{what} returned {dtype} logits; return floats":
        "{what} 返回的 logits 是 {dtype}；应返回浮点类型",
    "{what} changed the weights dict; read it, don't modify it":
        "{what} 修改了 weights 字典；请只读取，不要修改它",
    "On {model}, prompts [{B}, {T}], {steps} steps: max |yours - full recompute| per step = "
    "[{errs}] (step 0 is the prefill)":
        "模型：{model}，提示词 [{B}, {T}]，{steps} 步：每步的 max |你的 - 从头重算| = [{errs}]"
        "（第 0 步是预填充）",
    "{what}. The prefill is already off, before any cached key is reused. Check that the pieces "
    "it calls pass their own checks, the weights each layer reads, the final norm and the LM "
    "head, and the cache: in the prefill every layer writes the prompt's K/V at positions "
    "0..T-1 and reads exactly those.":
        "{what}。还没有复用任何已缓存的键，预填充就已经不对了。请检查：它调用的各个部件是否都"
        "通过了各自的检查，每一层读取的权重，最后的归一化和 LM head，以及缓存：预填充时，"
        "每一层都把提示词的 K/V 写到位置 0..T-1，读取的也恰好是这些。",
    "{what}. Decode step {i} gives the logits of its token alone, as if nothing were cached: the "
    "step did not read the K/V of the earlier tokens (or they were never written).":
        "{what}。第 {i} 步解码给出的是它的 token 单独输入时的 logits，就好像缓存里什么都没有："
        "这一步没有读取之前 token 的 K/V（或者它们根本没有被写入）。",
    "{what}. The prefill matches, decode step {i} does not. The token fed at step {i} continues "
    "its row at position {position}: its RoPE position, the place its K and V are written in "
    "the cache, and the keys it reads (all {seen} so far, its own included) follow on from what "
    "is already cached, and it must be the token the previous step picked.":
        "{what}。预填充一致，第 {i} 步解码却不一致。第 {i} 步输入的 token 接在所在行的后面，"
        "位于位置 {position}：它的 RoPE 位置、它的 K 和 V 在缓存中写入的地方，以及它读取的键"
        "（到目前为止共 {seen} 个，包括它自己）都要紧接在已缓存的内容之后；而且它必须是上一步"
        "选出的那个 token。",
    "bard, one prompt at a time: the logits of every step equal the full recompute within 1e-4 "
    "(3 prompts, 6 steps)":
        "bard，每次一个提示词：每一步的 logits 都与从头重算的结果相差不超过 1e-4"
        "（3 个提示词，各 6 步）",
    "bard, a batch of 3 prompts of one length decoded together":
        "bard，3 个等长的提示词组成一个 batch 一起解码",
    "another config (untied LM head, Hq·D ≠ C, 4 query heads per KV head): the same, batches of "
    "1 and 2":
        "另一个配置（LM head 不与嵌入共享权重，Hq·D ≠ C，每个 KV 头对应 4 个查询头）："
        "同样的检查，batch 大小为 1 和 2",
    "runs the prompt once and then only the new token per step (matmul FLOPs counted)":
        "提示词只运行一次，之后每步只运行新 token（统计矩阵乘法的 FLOPs）",
    "Prompt of {T} tokens, {steps} steps: your loop did {ratio:.1f} times the matmul work of one "
    "pass over the final sequence. A cached decode runs every token through the model once: the "
    "prompt in one prefill, then only the new token of each step, reading the earlier tokens' "
    "K/V from the cache (and only the filled part of it). Recomputing the whole sequence at "
    "every step gives the same logits at many times the cost.":
        "提示词 {T} 个 token，{steps} 步：你的循环所做的矩阵乘法工作量，是对最终序列跑一遍的 "
        "{ratio:.1f} 倍。带缓存的解码让每个 token 只经过模型一次：提示词在一次预填充中完成，"
        "之后每步只运行新 token，之前 token 的 K/V 从缓存中读取（而且只读已填充的部分）。"
        "每一步都重算整个序列，得到的 logits 相同，代价却要高出许多倍。",
    "{ratio:.1f}x the work of one pass": "工作量是跑一遍的 {ratio:.1f} 倍",
    "RoPE (chapter 02)": "RoPE（第 02 章）",
    "attention (chapter 03, or cached_attention of this notebook)":
        "注意力（第 03 章的，或本 notebook 中的 cached_attention）",
    "RMSNorm (chapter 04)": "RMSNorm（第 04 章）",
    "SwiGLU (chapter 04)": "SwiGLU（第 04 章）",
    "is built from your own RoPE, attention, RMSNorm and SwiGLU":
        "由你自己的 RoPE、注意力、RMSNorm 和 SwiGLU 搭建而成",
    "my_cached_decode never called your own {missing}. Build the model step from the functions "
    "you wrote (load them with learner_module), not from the package's model or ops. Calls "
    "seen: {calls}.":
        "my_cached_decode 从未调用你自己的 {missing}。请用你写的函数（用 learner_module 加载）"
        "搭建模型的一步，而不是用本包的模型或 ops。检测到的调用：{calls}。",
    ", ": "、",
    "none": "无",
}
