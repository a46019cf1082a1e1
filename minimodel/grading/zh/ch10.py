"""The Chinese of chapter 10's check messages (minimodel/grading/ch10/)."""

MESSAGES: dict[str, str] = {
    # common.py
    "bias yes": "带 bias",
    "bias None": "bias 为 None",
    # column.py: ch10.column_parallel_linear
    "rank r returns its [N, O/W] slice of x @ W.T + b, ranks in order":
        "rank r 返回 x @ W.T + b 中属于它的 [N, O/W] 那一片，各 rank 按顺序排列",
    "rank {rank} of {world} (weight {shape}, {bias})":
        "rank {rank}（共 {world} 个 rank；weight {shape}，{bias}）",
    "the W slices, side by side, are the full product": "W 个分片并排拼起来，就是完整的乘积",
    "cat(ranks' outputs, dim=-1)": "cat(各 rank 的输出, dim=-1)",
    "leaves x, weight and bias unchanged": "不修改 x、weight 和 bias",
    "column_parallel_linear changed one of its inputs in place":
        "column_parallel_linear 原地修改了它的某个输入",
    # row.py: ch10.row_parallel_linear
    "the ranks' partial sums add up to x @ W.T + b (the all-reduce)":
        "各 rank 的部分和加起来等于 x @ W.T + b（即 all-reduce）",
    "sum over {world} ranks (weight {shape}, {bias})":
        "{world} 个 rank 之和（weight {shape}，{bias}）",
    "rank r multiplies its input slice by its weight columns; the bias is added once, by rank 0":
        "rank r 用它那一段输入乘以它的那些权重列；偏置只加一次，由 rank 0 来加",
    "rank {rank} of {world} added the bias too: summed over the ranks it would count {world} "
    "times.":
        "rank {rank}（共 {world} 个 rank）也加了偏置：对各 rank 求和后，偏置会被计入 {world} 次。",
    "rank {rank} of {world}'s partial sum": "rank {rank}（共 {world} 个 rank）的部分和",
    # embedding.py: ch10.vocab_parallel_embedding
    "each rank returns its rows for the ids it holds and zeros for the others":
        "每个 rank 对自己持有的 ID 返回对应的行，对其他 ID 返回零",
    "it belongs to this rank": "这个 ID 属于本 rank",
    "it belongs to another rank, so this rank's row must be zeros":
        "这个 ID 属于别的 rank，所以本 rank 给出的那一行必须全为零",
    "rank {rank} of {world} (V={V}, its shard holds ids {first}..{last}) is wrong for id {bad}: "
    "{why}":
        "rank {rank}（共 {world} 个 rank；V={V}，它的分片持有 ID {first}..{last}）对 ID {bad} 的"
        "结果不对：{why}",
    "summed over the ranks (the all-reduce) it is the lookup table[ids], also when W does not "
    "divide V":
        "对各 rank 求和（即 all-reduce）之后就是查表结果 table[ids]，W 不能整除 V 时也一样",
    "sum over {world} ranks (V={V})": "{world} 个 rank 之和（V={V}）",
    "leaves ids and the shard unchanged": "不修改 ids 和分片",
    "vocab_parallel_embedding changed ids or the shard in place":
        "vocab_parallel_embedding 原地修改了 ids 或分片",
    # qkv.py: ch10.shard_qkv
    "q head {h}": "属于 q 头 {h} 的一行",
    "k head {h}": "属于 k 头 {h} 的一行",
    "v head {h}": "属于 v 头 {h} 的一行",
    "rank r holds its query heads, then the KV heads they read, for k and for v":
        "rank r 先持有它的查询头，然后是这些查询头读取的 KV 头，k 和 v 各一份",
    "with fewer KV heads than ranks, each rank holds the one KV head its query heads read "
    "(replicated)":
        "KV 头少于 rank 数时，每个 rank 持有它的查询头所读取的那一个 KV 头（复制）",
    "a row that is not in the weight": "权重中不存在的一行",
    "rank {rank} of {world} (Hq={Hq}, Hkv={Hkv}, D={D}): its row {j} should be {want}, got "
    "{held}":
        "rank {rank}（共 {world} 个 rank；Hq={Hq}，Hkv={Hkv}，D={D}）：它的第 {j} 行应是{want}，"
        "实际是{held}",
    "its q/k/v blocks, as the layer splits them, give the rank's heads of the full projection":
        "按层的切分方式拆开它的 q/k/v 块，得到的正是完整投影中属于该 rank 的那些头",
    "rank {rank}'s queries": "rank {rank} 的查询",
    "rank {rank}'s keys": "rank {rank} 的键",
    # reference.py: the capstone's cases and what is wrong with a layer
    "bard layer 0": "bard 的第 0 层",
    "a layer with 1 KV head": "KV 头只有 1 个的层",
    "tp_decoder_layer on {name} (T={T}), rank {rank} of {world}":
        "在 {name}（T={T}）上以 rank {rank}（共 {world} 个 rank）运行的 tp_decoder_layer",
    "{what} returned {got}; return a tuple (out, k, v)":
        "{what} 返回了 {got}；应返回元组 (out, k, v)",
    "{what}: out": "{what} 返回的 out",
    "{what}: {name} should be a torch.Tensor, got {got}":
        "{what}：{name} 应当是 torch.Tensor，实际是 {got}",
    "{what} changed the weights dict; read it, don't modify it":
        "{what} 修改了 weights 字典；请只读取，不要修改它",
    "On {name}, rank {rank} of {world}: max |out - the reference layer| = {err:.3g} (tolerance "
    "{tol}).":
        "在 {name}上，rank {rank}（共 {world} 个 rank）：max |out - 参考层| = {err:.3g}"
        "（容差 {tol}）。",
    "On {name}, rank {rank} of {world}: {n} (the {kept} KV head(s) of {total} that this rank "
    "keeps in its cache)":
        "在 {name}上，rank {rank}（共 {world} 个 rank）的 {n}（{total} 个 KV 头中本 rank 存入"
        "自己缓存的 {kept} 个）",
    "K (after k_norm and RoPE)": "K（经过 k_norm 和 RoPE 之后）",
    "its first is KV head {head}": "它给出的第一个头却是 KV 头 {head}",
    "it is no KV head's": "它给出的内容不属于任何一个 KV 头",
    "On {name} (Hq={Hq}, Hkv={Hkv}), rank {rank} of {world} should keep the {what} of KV "
    "head(s) {heads}, the one(s) its query heads read; {held}.":
        "在 {name}（Hq={Hq}，Hkv={Hkv}）上，rank {rank}（共 {world} 个 rank）应保存 KV 头 "
        "{heads} 的 {what}，即它的查询头所读取的那些；{held}。",
    "{problem} With one rank your layer is the whole layer: check the norms, RoPE (positions "
    "0..T-1), the causal attention of each query head on its KV head, and both residual adds.":
        "{problem}只有一个 rank 时，你的层就是完整的层：检查各个归一化、RoPE（位置 0..T-1）、"
        "每个查询头在它的 KV 头上的因果注意力，以及两次残差相加。",
    # ranks.py: the two rank processes
    "The two ranks run in new processes, which cannot see this one's memory: each loads "
    "tp_decoder_layer from your saved ch10 notebook, and none was found here. {error}":
        "两个 rank 运行在新的进程中，看不到本进程的内存：每个 rank 都从你保存的 ch10 notebook "
        "中加载 tp_decoder_layer，而这里找不到这个 notebook。{error}",
    "Define tp_decoder_layer at the top level: the two ranks run in new processes, which look "
    "it up by name.":
        "请在顶层定义 tp_decoder_layer：两个 rank 运行在新的进程中，它们按名字查找这个函数。",
    "Not run on two processes: it must first pass with one rank (the first check).":
        "没有在两个进程上运行：它必须先在一个 rank 上通过（第一项检查）。",
    "{names} in {notebook}, as saved, is not what this kernel runs.":
        "{notebook} 中保存的 {names} 与这个内核正在运行的不一样。",
    "{names} in {notebook}, as saved, are not what this kernel runs.":
        "{notebook} 中保存的 {names} 与这个内核正在运行的不一样。",
    "{head} The two ranks are new processes: each loads your functions from the saved "
    "notebook. Save the notebook (Ctrl-S) and run this check again.":
        "{head}两个 rank 是新的进程：每个都从保存的 notebook 中加载你的函数。请保存 notebook"
        "（Ctrl-S），再运行这项检查。",
    "Rank process {name} exited with code {code} before it reported.":
        "rank 进程 {name} 还没报告结果就退出了，退出码为 {code}。",
    "Rank(s) {waiting} were still running {after:.0f} s after rank {done} had finished: most "
    "likely waiting in an all-reduce that the other rank never made. Every rank must call "
    "all_reduce the same number of times, in the same order.":
        "rank {done} 结束 {after:.0f} 秒后，rank {waiting} 仍在运行：很可能是在等待另一个 rank "
        "从未发起的 all-reduce。每个 rank 调用 all_reduce 的次数和顺序都必须相同。",
    "The {world} ranks did not finish within {limit:.0f} s.":
        "{world} 个 rank 没有在 {limit:.0f} 秒内完成。",
    "On rank {rank} of {world} your layer raised:\n{payload}":
        "你的层在 rank {rank}（共 {world} 个 rank）上抛出了异常：\n{payload}",
    # capstone.py: ch10.tp_decoder_layer
    "with one rank (world_size=1, no process group) it is the reference decoder layer within "
    "1e-4, and keeps K and V of every KV head":
        "只有一个 rank 时（world_size=1，没有进程组），它与参考实现的解码层相差在 1e-4 以内，"
        "并保存每个 KV 头的 K 和 V",
    "two gloo processes (bard layer 0; a layer whose one KV head both ranks hold): every rank "
    "returns the reference layer's output within 1e-4":
        "两个 gloo 进程（bard 的第 0 层；一个只有 1 个 KV 头、两个 rank 都持有它的层）：每个 rank "
        "返回的输出与参考层相差在 1e-4 以内",
    "{problem} With one rank it was right, so look at what the ranks must add up and what each "
    "must hold: which rows of each weight a rank uses, and where the partial sums are "
    "all-reduced.":
        "{problem}只有一个 rank 时它是对的，所以要看各 rank 必须加起来的是什么、各自必须持有"
        "什么：一个 rank 用每个权重的哪些行，以及部分和在哪里做 all-reduce。",
    "each rank keeps the K (after QK-norm and RoPE) and V of the KV heads its query heads read, "
    "replicated when there are fewer KV heads than ranks":
        "每个 rank 保存它的查询头所读取的那些 KV 头的 K（经过 QK 归一化和 RoPE 之后）和 V，"
        "KV 头少于 rank 数时复制",
    "two all-reduces per layer, of [T, C] each: the first sums o_proj's partials, the second "
    "down_proj's (recorded on the wire)":
        "每层两次 all-reduce，每次都是 [T, C]：第一次对 o_proj 的部分和求和，第二次对 "
        "down_proj 的（在通信层面记录）",
    "On {name}, rank {rank} of {world}": "在 {name}上，rank {rank}（共 {world} 个 rank）",
    " With none, no rank ever sees the others' partial sums.":
        "一次都没有的话，任何 rank 都看不到其他 rank 的部分和。",
    "{where}: {n} all-reduce(s) {shapes}. A Qwen3 block needs exactly two: one after the "
    "row-parallel o_proj and one after the row-parallel down_proj.{none}":
        "{where}：{n} 次 all-reduce {shapes}。一个 Qwen3 块恰好需要两次：一次在行并行的 o_proj "
        "之后，一次在行并行的 down_proj 之后。{none}",
    "{where}: all-reduce {j} carried a tensor of shape {shape}; both carry the [T, C] = {want} "
    "partial sums of a row-parallel layer.":
        "{where}：第 {j} 次 all-reduce 传送的张量形状为 {shape}；两次传送的都应是行并行层的 "
        "[T, C] = {want} 部分和。",
    " It summed the residual too, once per rank: add the residual after the all-reduce.":
        "它把残差也一起求和了，每个 rank 一份：应在 all-reduce 之后再加残差。",
    "the attention branch": "注意力分支",
    "the MLP branch": "MLP 分支",
    "{where}: all-reduce {j} should sum the partial outputs of {layer} ({part}, before its "
    "residual add), and summed something else.{hint}":
        "{where}：第 {j} 次 all-reduce 应当对 {layer} 的部分输出求和（{part}，在它的残差相加"
        "之前），实际求和的却是别的东西。{hint}",
    "bard: 2 x {C} float32 numbers = {nbytes:,d} bytes per token and layer":
        "bard：每个 token、每层 2 x {C} 个 float32 数 = {nbytes:,d} 字节",
    "each rank does about 1/W of the layer's matmul work (FLOPs counted) with your "
    "column_parallel_linear, row_parallel_linear and shard_qkv":
        "每个 rank 用你的 column_parallel_linear、row_parallel_linear 和 shard_qkv 完成该层约 "
        "1/W 的矩阵乘法工作量（按 FLOPs 统计）",
    "On {name}, rank {rank} of {world} did {did:.2f} of the layer's matmul FLOPs; its share is "
    "{share:.2f}. A rank that multiplies by the whole weights gets the right numbers, but then "
    "the ranks save nothing: each must compute only its heads and its columns of the "
    "intermediate size.":
        "在 {name}上，rank {rank}（共 {world} 个 rank）完成了该层矩阵乘法 FLOPs 的 {did:.2f}，"
        "而它的份额是 {share:.2f}。用完整权重做乘法的 rank 能得到正确的数字，但这样各 rank 什么"
        "也没省下：每个 rank 只应计算它自己的头，以及中间维度中属于它的那些列。",
    "Calls seen on rank {rank}: {calls}.": "在 rank {rank} 上检测到的调用：{calls}。",
    "Calls seen on rank {rank}: none.": "在 rank {rank} 上没有检测到任何调用。",
    "tp_decoder_layer never called your {missing}. Build the layer from the functions of "
    "exercises 1, 2 and 4 of this notebook. {seen}":
        "tp_decoder_layer 从未调用你的 {missing}。请用本 notebook 练习 1、2 和 4 中的函数来搭建"
        "这个层。{seen}",
    "each rank did {ratio:.2f} of its share at most":
        "每个 rank 的工作量至多是其份额的 {ratio:.2f} 倍",
}
