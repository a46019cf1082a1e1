"""The Chinese of chapter 08's check messages (minimodel/grading/ch08/)."""

MESSAGES: dict[str, str] = {
    # guard.py
    "the grader's {name}": "评分器的 {name}",
    "{what} hands its work to {found}: the exercise is to write that decision yourself, from the "
    "rules of chapter 08, not to call the engine's (or this grader's) own answer":
        "{what} 把自己的工作交给了 {found}：这道练习要你依照第 08 章的规则亲自写出这个决策，"
        "而不是调用引擎（或本评分器）现成的答案",
    # admit.py
    "{what} changed its `waiting` or `cached` list; leave the queue as it is (the scheduler "
    "removes requests itself)":
        "{what} 修改了传入的 `waiting` 或 `cached` 列表；请保持队列原样"
        "（请求由调度器自己移出队列）",
    " Return how many tokens each admitted request prefills (its q_len), not its index in the "
    "queue.":
        "应返回每个被准入的请求本步预填充的 token 数（即它的 q_len），而不是它在队列中的下标。",
    " It returned {n} numbers for {w} waiting requests: one q_len per admitted request, in queue "
    "order.":
        "它为 {w} 个等待中的请求返回了 {n} 个数：应按队列顺序，每个被准入的请求一个 q_len。",
    " Only free_seqs = {free_seqs} requests may start.":
        "只能有 free_seqs = {free_seqs} 个请求开始运行。",
    " The last admitted request was cut to a chunk by the token budget; nothing after a chunk is "
    "admitted in the same step.":
        "最后一个被准入的请求已被 token 预算截成了一个分块；同一步里，分块之后不再准入任何请求。",
    " The token budget is used up: no more requests this step.":
        "token 预算已经用完：本步不能再准入请求。",
    " Request {i} does not fit: bringing {q} tokens takes {more} new pages and {free} are free; a "
    "partly filled page is still a whole page.":
        "请求 {i} 放不下：带上 {q} 个 token 需要 {more} 个新页，而空闲页只有 {free} 个；"
        "只填了一部分的页也要占一整页。",
    " Request {i} does not fit in the free pages, so the queue stops there: first come, first "
    "served, no skipping ahead.":
        "请求 {i} 在空闲页里放不下，队列就停在这里：先来先服务，不能越过它去取后面的请求。",
    " Request {i} fits: it already holds {cached} cached tokens in {held} pages, with room for "
    "{room} more in its last page, so bringing {q} tokens takes only {more} new pages.":
        "请求 {i} 放得下：它已缓存的 {cached} 个 token 占了 {held} 页，最后一页还能再放 {room} 个，"
        "所以带上 {q} 个 token 只需要 {more} 个新页。",
    " Request {i} crosses the token budget: admit a chunk of {q} tokens of it (the rest comes "
    "next step).":
        "请求 {i} 超出了 token 预算：准入它的一个分块，共 {q} 个 token（剩下的部分下一步再处理）。",
    " Request {i} fits: its {n} tokens need {pages} pages (no page is reserved for its first new "
    "token yet; decode asks for that one).":
        "请求 {i} 放得下：它的 {n} 个 token 需要 {pages} 页（不必为它的第一个新 token 预留页；"
        "那一页由解码步去申请）。",
    " The last request brings {q} tokens: the rest of the token budget ({rest}) or all it still "
    "has to prefill, whichever is smaller.":
        "最后一个请求应带来 {q} 个 token：剩余的 token 预算（{rest}）与它尚待预填充的 token 数，"
        "取两者中较小的那个。",
    "{what} returned {got!r}; return a list of ints: the tokens each admitted request prefills, "
    "here {want}":
        "{what} 返回了 {got!r}；应返回一个 int 列表，即每个被准入的请求预填充的 token 数，"
        "这里应为 {want}",
    "{what} returned {got}, expected {want}.{hint}": "{what} 返回了 {got}，应为 {want}。{hint}",
    "returns a list of ints; [] when the queue is empty or nothing fits":
        "返回一个 int 列表；队列为空或一个请求都放不下时返回 []",
    "needs ceil(n / page_size) pages per prompt, and takes them from the free pages one request "
    "after another":
        "每个提示词需要 ceil(n / page_size) 页，按请求的先后依次从空闲页中取用",
    "first come, first served: stops at the first request whose pages do not fit, even if a "
    "later one would":
        "先来先服务：在第一个页放不下的请求处停下，即使后面的请求放得下也不再准入",
    "token budget: whole prompts while they fit, then one chunk of the prompt that crosses it, "
    "and nothing after that":
        "token 预算：放得下时准入整个提示词，然后为超出预算的那个提示词准入一个分块，此后不再准入",
    "a request with tokens already cached (a prompt being chunked) fills the room left in its "
    "last page before it takes new pages":
        "已有 token 在缓存中的请求（正在分块预填充的提示词）先填满最后一页剩下的空间，再申请新页",
    "admits at most free_seqs requests": "最多准入 free_seqs 个请求",
    "equals the engine's Scheduler on 200 random queues":
        "在 200 个随机队列上与引擎的 Scheduler 结果完全一致",
    "{admitted} requests admitted over 200 queues, exactly as the scheduler does":
        "200 个队列共准入 {admitted} 个请求，与调度器完全一致",
    # decode.py
    " There were enough pages: only requests whose new token starts a page need one (here "
    "{newly}), and free_pages = {free}.":
        "页是够的：只有新 token 开启新一页的请求才需要一页（这里是 {newly}），"
        "而 free_pages = {free}。",
    " Too many preemptions: a preempted request gives back every page it holds, and the requests "
    "after it can use them.":
        "抢占得太多了：被抢占的请求会交还它持有的全部页，其余的请求可以接着用这些页。",
    " Preempt the newest request that has not got its page yet (the end of the list), never an "
    "older one: the oldest have waited longest.":
        "应抢占还没拿到页的请求中最新的那个（列表末尾），绝不抢占更早的请求：最早的请求等得最久。",
    " Pages ran out: someone must be preempted, and nothing may be lost.":
        "页用完了：必须有请求被抢占，而且任何请求都不能丢失。",
    " List the preempted requests in the order they were preempted (newest first).":
        "被抢占的请求要按被抢占的先后列出（最新的在前）。",
    "{what} changed `num_tokens`; leave it as it is": "{what} 修改了 `num_tokens`；请保持它原样",
    "{what} returned {got!r}; return a tuple of two lists of ints (decoding, preempted), here "
    "{want}":
        "{what} 返回了 {got!r}；应返回由两个 int 列表组成的元组 (decoding, preempted)，"
        "这里应为 {want}",
    "{what} returned {got}: every request must be in exactly one of the two lists (nothing is "
    "dropped); expected {want}.":
        "{what} 返回了 {got}：每个请求都必须恰好出现在两个列表之一中（不能丢掉任何请求）；"
        "应为 {want}。",
    "returns (decoding, preempted), two lists that hold every request once":
        "返回 (decoding, preempted) 两个列表，每个请求恰好出现一次",
    "a request needs a new page only when its new token starts one; with enough pages nobody is "
    "preempted":
        "只有新 token 开启新一页时，请求才需要新页；页足够时没有请求被抢占",
    "out of pages: preempts the newest request (itself, when it is the newest left) and reuses "
    "its pages":
        "页用完时：抢占最新的请求（它自己就是剩下的请求中最新的时，抢占自己），并复用被抢占请求的页",
    "equals the engine's Scheduler on 200 random batches":
        "在 200 个随机 batch 上与引擎的 Scheduler 结果完全一致",
    "{preempted} preemptions over 200 batches, exactly as the scheduler does":
        "200 个 batch 共发生 {preempted} 次抢占，与调度器完全一致",
    # timing.py
    " That is TPOT; return (ttft, tpot) in this order.":
        "这是 TPOT；请按 (ttft, tpot) 的顺序返回。",
    " TTFT is the wait from the request's arrival to its first token, not the first gap.":
        "TTFT 是从请求到达到第一个 token 出现的等待时间，不是第一个间隔。",
    " Subtract the arrival time: TTFT is a duration.": "要减去到达时间：TTFT 是一段时长。",
    " TTFT ends at the first token, not the last.": "TTFT 截止于第一个 token，而不是最后一个。",
    " TPOT leaves out the first token: its latency is TTFT's job. Average the gaps after it.":
        "TPOT 不包括第一个 token：它的延迟算在 TTFT 里。请对它之后的各个间隔取平均。",
    " n tokens have only n - 1 gaps between them.": "n 个 token 之间只有 n - 1 个间隔。",
    " TPOT is the mean of all gaps after the first token, not the last gap.":
        "TPOT 是第一个 token 之后所有间隔的平均值，不是最后一个间隔。",
    " That is tokens per second; TPOT is seconds per token.":
        "这是每秒生成的 token 数；TPOT 是每个 token 所需的秒数。",
    " Keep seconds: the times are in seconds.": "请保持以秒为单位：给出的时间本身就是秒。",
    " That is TTFT; TPOT comes second in the tuple.": "这是 TTFT；TPOT 是元组中的第二项。",
    "ttft_tpot(arrival={arrival:.4f}, token_times={shown} ({n} tokens))":
        "ttft_tpot(arrival={arrival:.4f}, token_times={shown})（共 {n} 个 token）",
    "{what} changed token_times; leave it as it is": "{what} 修改了 token_times；请保持它原样",
    "{what} returned {got!r}; return a tuple of two floats (ttft, tpot) in seconds":
        "{what} 返回了 {got!r}；应返回由两个 float 组成的元组 (ttft, tpot)，单位为秒",
    "{what}: {name} = {got:.6g}, expected {want:.6g}.{hint}":
        "{what}：{name} = {got:.6g}，应为 {want:.6g}。{hint}",
    "TTFT = first token time - arrival, on 20 random requests":
        "在 20 个随机请求上：TTFT = 第一个 token 的时间 - 到达时间",
    "ttft_tpot returned {got!r}; return a tuple (ttft, tpot)":
        "ttft_tpot 返回了 {got!r}；应返回元组 (ttft, tpot)",
    "ttft_tpot(arrival={arrival:.4f}, {n} tokens, first at {first:.4f}): ttft = {got!r}, "
    "expected {want:.6g}.{hint}":
        "对 arrival={arrival:.4f}、共 {n} 个 token、第一个出现在 {first:.4f} 的请求，ttft_tpot "
        "给出 ttft = {got!r}，应为 {want:.6g}。{hint}",
    "TPOT = mean gap between consecutive tokens after the first, on uneven gaps and stalls":
        "间隔不均、中途有停顿时：TPOT = 第一个 token 之后相邻 token 间隔的平均值",
    "one token: TPOT is 0.0 (there is no gap)": "只有一个 token 时：TPOT 为 0.0（没有间隔）",
    "ttft_tpot(arrival={arrival:.4f}, token_times=[{first:.4f}]) gave tpot {got}; with one "
    "token there is no gap, and the engine reports 0.0":
        "ttft_tpot(arrival={arrival:.4f}, token_times=[{first:.4f}]) 给出的 tpot 是 {got}；"
        "只有一个 token 时没有间隔，引擎报告的是 0.0",
    "works on perf_counter-sized clocks (1e6 s) and leaves the input unchanged":
        "在 perf_counter 量级的时钟（1e6 s）上也算得对，并且不修改输入",
    # harness.py
    "your step asked the pool for {n!r} pages; ask for a whole number >= 0 (0 when the "
    "request's pages already hold its tokens)":
        "你的单步向缓存池申请了 {n!r} 页；申请的页数应是 >= 0 的整数（请求已有的页放得下它的 "
        "token 时，申请 0 页）",
    "your step asked the pool for {pages} with {free} free. The scheduling decision comes first: "
    "admit only what fits in the free pages, and in a decode step preempt before a request takes "
    "a page that is not there.":
        "你的单步向缓存池申请了 {pages}，而空闲页只有 {free} 个。调度决策要放在前面：只准入空闲页"
        "放得下的请求；在解码步中，没有空闲页时要先抢占，再让请求取页。",
    "your step gave back page {page}, which is not lent out (given back twice?); return a "
    "request's pages once, then empty its page table":
        "你的单步交还了页 {page}，但它并未被借出（交还了两次？）；一个请求的页只交还一次，"
        "交还后要清空它的页表",
    "{what} should be a 1-D integer tensor, got {dtype} of shape {shape}":
        "{what} 应当是一维整数张量，实际是形状为 {shape} 的 {dtype}",
    "{what} should be a tensor or a list of ints, got {got}":
        "{what} 应当是张量或 int 列表，实际是 {got}",
    "{what} should hold ints, got {got}": "{what} 的元素应当是 int，实际是 {got}",
    "{what} should have {n} entries, got {got}": "{what} 应有 {n} 项，实际有 {got} 项",
    "engine.backend.plan takes an AttentionMetadata (minimodel.engine.attention), got {got}":
        "engine.backend.plan 接受的是 AttentionMetadata（minimodel.engine.attention），"
        "实际传入的是 {got}",
    "the metadata says page_size={got}; the pool's pages hold {S} tokens":
        "元数据中 page_size={got}；而缓存池的每页放 {S} 个 token",
    "q_lens {q_lens} and kv_lens {kv_lens} should have one entry for each request of the step":
        "q_lens {q_lens} 和 kv_lens {kv_lens} 应当为本步的每个请求各有一项",
    "qo_indptr is {got}; with q_lens {q_lens} request i's new tokens are rows "
    "qo_indptr[i]:qo_indptr[i+1] of the packed batch, so it should be {want}":
        "qo_indptr 是 {got}；q_lens 为 {q_lens} 时，请求 i 的新 token 是打包后 batch 的第 "
        "qo_indptr[i]:qo_indptr[i+1] 行，所以它应为 {want}",
    "request {i} of the step brings {q} new tokens and has kv_len {kv}: kv_len counts every "
    "token cached after this step, the new ones included":
        "本步的请求 {i} 带来 {q} 个新 token，而它的 kv_len 是 {kv}：kv_len 计的是本步之后"
        "缓存中的全部 token，新 token 也算在内",
    "request {i} of the step: kv_indptr gives it {n_pages} pages and kv_last_page_len says its "
    "last page holds {last}, {described} in all, but it has {kv} after this step (kv_lens). "
    "FlashInfer reads only the page table, so the two must agree.":
        "本步的请求 {i}：kv_indptr 给了它 {n_pages} 页，kv_last_page_len 说它的最后一页有 {last}，"
        "合计 {described}，但本步之后它有 {kv} 个 token（kv_lens）。FlashInfer 只读页表，"
        "所以两者必须一致。",
    "request {i} of the step lists page {bad} in kv_indices; the pool has pages 0..{top}":
        "本步的请求 {i} 在 kv_indices 中列出了页 {bad}；缓存池的页编号是 0..{top}",
    "positions of request {i} of the step are {got}; its new tokens come after its {cached} "
    "cached ones: {want}":
        "本步请求 {i} 的 positions 是 {got}；它的新 token 排在已缓存的 {cached} 个 token 之后，"
        "应为 {want}",
    "slot_mapping sends the K/V of request {i}'s token at position {pos} to slot {got}, but its "
    "pages {pages} put position {pos} in slot {want}: attention would not find it where it reads":
        "slot_mapping 把请求 {i} 位置 {pos} 上 token 的 K/V 写到槽位 {got}，但按它的页 {pages}，"
        "位置 {pos} 在槽位 {want}：注意力在它读取的地方找不到这份 K/V",
    "after {steps} steps requests are still left (waiting {waiting}, running {running}); a "
    "request leaves `running` when it has its max_new_tokens":
        "运行 {steps} 步之后仍有请求没有完成（waiting {waiting}，running {running}）；"
        "请求生成满 max_new_tokens 个 token 后就要离开 `running`",
    "my_engine_step returned {ran!r}; return a list of (request_id, new tokens) pairs, one for "
    "each request it ran":
        "my_engine_step 返回了 {ran!r}；应返回由 (request_id, 新 token 数) 组成的列表，"
        "本步运行的每个请求各一对",
    # reference.py
    "tight pool": "紧张的缓存池",
    "roomy pool": "宽裕的缓存池",
    # capstone.py
    "{piece} (this notebook)": "{piece}（本 notebook）",
    "nothing": "无",
    " The first token is already wrong: it comes from the logits of the row of the prompt's last "
    "token, once the whole prompt is in the cache.":
        "第一个 token 就已经错了：它应取自提示词最后一个 token 所在那一行的 logits，"
        "而且要等整个提示词都进入缓存之后才采样。",
    " The first tokens agree, then they part: look at what a decode step feeds the model (the "
    "last sampled token, at its position) and at what a recomputed request brings.":
        "前几个 token 一致，之后才出现分歧：检查解码步喂给模型的是什么（上一步采样出的 token，"
        "及其所在的位置），以及被重计算的请求带来的是什么。",
    " It should generate exactly max_new_tokens = {n} tokens.":
        "它应当恰好生成 max_new_tokens = {n} 个 token。",
    "{case}, request r{request} (prompt of {n} tokens): your engine generated {got}, "
    "mm.LLM.generate {want}; they part at token {k}.{tail}":
        "{case}，请求 r{request}（提示词有 {n} 个 token）：你的引擎生成了 {got}，"
        "mm.LLM.generate 生成的是 {want}；两者在 token {k}（从 0 开始计数）处出现分歧。{tail}",
    "{case}: every request is done but only {free} of the {pages} pages are back in the pool; a "
    "finished request gives back its pages":
        "{case}：所有请求都已完成，但 {pages} 页中只有 {free} 页回到了缓存池；"
        "完成的请求要交还它的页",
    "{requests} requests, {tokens} tokens, {steps} steps{preemptions}":
        "{requests} 个请求，{tokens} 个 token，{steps} 步{preemptions}",
    ", {n} preemption": "，{n} 次抢占",
    ", {n} preemptions": "，{n} 次抢占",
    "a roomy pool (chunked prefill, several requests decoding together): the same greedy tokens "
    "as mm.LLM.generate":
        "宽裕的缓存池（分块预填充，多个请求一起解码）：贪心解码得到与 mm.LLM.generate 相同的 token",
    "a tight pool (preemption and recompute): the same tokens, and every page back in the pool at "
    "the end":
        "紧张的缓存池（抢占与重计算）：得到相同的 token，结束时所有页都回到缓存池",
    "step by step, the same batches as the engine's scheduler":
        "每一步都运行与引擎调度器相同的 batch",
    "prefill step": "预填充步",
    "decode step": "解码步",
    " A waiting request fits, so this is a prefill step: prefill comes first.":
        "有等待中的请求放得下，所以这是一个预填充步：预填充优先。",
    " No waiting request fits the free pages, so this is a decode step for every running "
    "request.":
        "没有等待中的请求放得进空闲页，所以这是一个解码步，所有运行中的请求都参与。",
    "{case}, step {step}: your step ran {mine}; the engine's scheduler runs a {kind} of "
    "{want}.{why}":
        "{case}，第 {step} 步：你的单步运行的请求：{mine}；"
        "引擎的调度器运行的是{kind}：{want}。{why}",
    "{case}: your engine took {got} steps, the engine's scheduler {want}":
        "{case}：你的引擎用了 {got} 步，引擎的调度器用了 {want} 步",
    "is built from your own admit, decode_step, ch07.paged_metadata, ch07.slot_mapping and "
    "ch05.sample":
        "由你自己的 admit、decode_step、ch07.paged_metadata、ch07.slot_mapping 和 ch05.sample "
        "搭建而成",
    ", ": "、",
    "your step stopped before its runs were over (see the checks above), so it is not known yet "
    "whether it uses your own {pieces}":
        "你的单步没等运行结束就停下了（见上面的检查），所以还不知道它是否用到了你自己的 {pieces}",
    "your step never called your own {pieces}: the capstone composes your pieces, so a step "
    "built on the package's scheduler or metadata does not count":
        "你的单步从未调用你自己的 {pieces}：综合练习要组合的是你自己的组件，"
        "建立在包里的调度器或元数据之上的单步不算数",
    # common.py
    "{k} page": "{k} 页",
    "{k} pages": "{k} 页",
    "{k} token": "{k} 个 token",
    "{k} tokens": "{k} 个 token",
}
