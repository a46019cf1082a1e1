"""The Chinese of chapter 12's check messages (minimodel/grading/ch12/)."""

MESSAGES: dict[str, str] = {
    # common.py: the two worlds and their comparison
    "{what} calls the engine's {found}: the exercise is to walk and change the tree yourself, "
    "from its nodes' fields (key, pages, children, parent, last_used) and the allocator's share "
    "and free":
        "{what} 调用了引擎自己的 {found}：这道练习要你亲手遍历、修改这棵树，只用节点的字段"
        "（key、pages、children、parent、last_used）以及分配器的 share 和 free",
    "match_prefix(cache, tokens={tokens} ({n} tokens), max_pages={max_pages})":
        "match_prefix(cache, tokens={tokens}（共 {n} 个 token）, max_pages={max_pages})",
    "the root": "根节点",
    "the node of pages {pages}": "持有页 {pages} 的节点",
    "insert(cache, tokens={tokens} ({n} tokens), pages={pages}, start={where})":
        "insert(cache, tokens={tokens}（共 {n} 个 token）, pages={pages}, start={where})",
    "an int": "一个 int",
    "a tuple (pages: list[int], node: Node)": "一个 tuple (pages: list[int], node: Node)",
    "{what}: {call} returned {got!r}; it should return {shape}":
        "{what}：{call} 返回了 {got!r}；它应当返回{shape}",
    "{what}: {call} freed (returned) {got} pages, the engine's {eng} {want}.{hint}":
        "{what}：{call} 释放（返回）了 {got} 页，引擎的 {eng} 则是 {want} 页。{hint}",
    "{what}: {call} returned pages {got}, the engine's {eng} {want}.{hint}":
        "{what}：{call} 返回的页是 {got}，引擎的 {eng} 返回的是 {want}。{hint}",
    "not a Node of the tree": "不是这棵树中的 Node",
    "the end of pages {pages}": "是页 {pages} 终止处的节点",
    "{what}: {call} returned the right pages, but its node is {node}; it should be the node "
    "where those pages end ({want}).{hint}":
        "{what}：{call} 返回的页是对的，但返回的节点{node}；它应当是这些页终止处的节点"
        "（{want}）。{hint}",
    "{what}: your {you} was called {got} times, the engine's {want}{hint}":
        "{what}：你的 {you} 被调用了 {got} 次，引擎的则是 {want} 次{hint}",
    "{what}: the tree differs from the engine's: {got} instead of {want} (each node's pages, "
    "children in brackets).{hint}":
        "{what}：树的形状与引擎的不同：得到 {got}，应为 {want}（写出每个节点的页，其子节点"
        "放在紧随其后的方括号里）。{hint}",
    "{what}: a request's page table is {got}, with the engine's tree {want}.{hint}":
        "{what}：某个请求的页表是 {got}，换成引擎的树则是 {want}。{hint}",
    "{what}: a running request's node moved: it ended the path of its pages {was}, and now "
    "ends {now}.{hint}":
        "{what}：一个运行中请求的节点变了：它原本位于自己的页 {was} 这条路径的末端，现在"
        "却位于 {now} 的末端。{hint}",
    "{what}: the tree has the engine's nodes, but cache.num_pages says {got}, the engine's "
    "tree {want}.{hint}":
        "{what}：树的节点与引擎的一致，但 cache.num_pages 是 {got}，引擎的树是 {want}。{hint}",
    "{what}: page {page} has {got} holders, with the engine's tree {want} (pages whose counts "
    "differ: {pages}).{hint}":
        "{what}：页 {page} 有 {got} 个持有者，换成引擎的树则是 {want} 个（计数不同的页："
        "{pages}）。{hint}",
    "{what}: {free} pages on the free list and {evictable} evictable, with the engine's tree "
    "{want_free} and {want_evictable}.{hint}":
        "{what}：空闲链表上有 {free} 页，可驱逐的有 {evictable} 页；换成引擎的树则分别是 "
        "{want_free} 页和 {want_evictable} 页。{hint}",
    "{what}: the tree has the engine's nodes, but not in the same order of last use, so the "
    "next eviction would take another leaf.{hint}":
        "{what}：树的节点与引擎的一致，但最近使用的先后顺序不同，下一次驱逐就会挑中另一个"
        "叶子节点。{hint}",
    "a random stream, page size {S}": "一条随机请求流，页大小 {S}",
    "{what}: after your {you}, the {event} failed with {error}: {text}.{hint}":
        "{what}：调用你的 {you} 之后，{event}这一步出错，抛出 {error}：{text}。{hint}",
    "{what}, after the {event}": "{what}，{event}之后",
    "arrival of a prompt of {n} tokens": "一个 {n} 个 token 的提示词到来",
    "growth of request {i} by {n} tokens": "请求 {i} 的 token 增加 {n} 个",
    "end of request {i}": "请求 {i} 结束",
    "lookup of {n} tokens (max_pages={max_pages})": "查找 {n} 个 token（max_pages={max_pages}）",
    "eviction of {n} pages": "驱逐 {n} 页",
    # match.py
    " Only whole pages that hold exactly the prompt's tokens are shared: a page whose tokens "
    "agree only in part holds K/V computed for other tokens. The match may take at most "
    "len(tokens) // page_size pages, and at most max_pages when it is not None.":
        "只有恰好存放着提示词这些 token 的整页才能共享：token 只有部分相同的页，存的是为别的 "
        "token 算出的 K/V。匹配最多取 len(tokens) // page_size 页；max_pages 不为 None 时，"
        "也最多取 max_pages 页。",
    " The node returned is the one whose last page is the last page matched; when the match "
    "stops inside a node, that is not the node as it was.":
        "返回的节点，应当以匹配到的最后一页作为它的最后一页；匹配在某个节点内部停下时，这已"
        "不是原来的那个节点了。",
    " Where the match stops inside a node, the node is split in two there (an upper node with "
    "the pages that matched, and below it the rest), so that every node is shared whole and "
    "the match ends at a node's end.":
        "匹配在某个节点内部停下时，要在那里把该节点一分为二（上层节点持有匹配上的页，其余"
        "部分挂在它下面），这样每个节点都被整个共享，匹配也总是结束在某个节点的末尾。",
    " The split keeps the node object for the *lower* part (the rest of its pages and its "
    "children), since requests that ended at that node must still end there; the upper part "
    "is the new Node, its parent's child now.":
        "分裂时，原来的节点对象留给*下层*部分（它其余的页和它的子节点），因为终止于该节点的"
        "请求必须仍然终止在那里；上层部分是新建的 Node，如今是原父节点的子节点。",
    " match_prefix only reads the tree (and splits a node): the caller takes the references on "
    "the pages it returns.":
        "match_prefix 只读取这棵树（外加分裂节点）：对返回的页获取引用，是调用者的事。",
    " A match uses every node on its path: their last_used becomes the cache's time now "
    "(next(cache._clock), once per call), so that eviction takes the least recently used leaf "
    "first. The upper node of a split starts with the node's own last_used.":
        "一次匹配会用到路径上的每个节点：它们的 last_used 都变成缓存的当前时刻"
        "（next(cache._clock)，每次调用只取一次），这样驱逐时才会先取最近最少使用的叶子节点。"
        "分裂出的上层节点，last_used 沿用原节点的值。",
    " A match adds no page to the tree and removes none, so it leaves cache.num_pages as it "
    "is.":
        "匹配既不往树里加页，也不从树里移除页，所以 cache.num_pages 应保持不变。",
    " The caller shares the pages returned and hands the node to insert as `start`.":
        "调用者会共享返回的页，并把返回的节点作为 `start` 交给 insert。",
    "whole pages only: prompts that part from the tree inside a page, at a page's end, or end "
    "in a partly filled page (page sizes 1-4)":
        "只共享整页：提示词在某页内部或某页末尾与树分叉，或者以一个未填满的页结尾（页大小 1-4）",
    "page size {S}": "页大小 {S}",
    "{n} matches, as the engine's": "{n} 次匹配，与引擎的一致",
    "at most max_pages pages (0: none, None: no limit), so a prompt the tree holds whole still "
    "computes its last token":
        "最多 max_pages 页（0：一页不取，None：不设上限），这样即使树中存有整个提示词，它的"
        "最后一个 token 仍会被计算",
    "splits the node where a match ends inside it; a node that requests hold keeps their place":
        "匹配在节点内部结束时分裂该节点；请求所终止的节点保持原位",
    "marks every node on the matched path as just used (the order eviction follows)":
        "把匹配路径上的每个节点标记为刚刚用过（驱逐依据的正是这个顺序）",
    "equals the engine's RadixCache.match over random request streams (page sizes 1, 2, 3, 4 "
    "and 16)":
        "在随机请求流上与引擎的 RadixCache.match 结果一致（页大小 1、2、3、4 和 16）",
    "{n} matches over 5 streams, as the engine's": "5 条请求流上共 {n} 次匹配，与引擎的一致",
    # insert.py
    " insert returns, for every page of tokens, the page the tree holds for it afterwards: "
    "where the tree had those tokens already, the tree's own page (the caller then uses it and "
    "lets its copy go); where they are new, the page given.":
        "insert 要为每一页 token 返回调用之后树为它持有的那一页：树中原本已有这些 token 的"
        "地方，返回树自己的页（调用者随后改用它，并放掉自己的那份副本）；token 是新的地方，"
        "返回传入的页。",
    " The node returned is where the inserted tokens end (below start): the new leaf, or the "
    "node that already held their last page.":
        "返回的节点，是插入的 token 终止的地方（在 start 之下）：新的叶子节点，或者原本就"
        "持有它们最后一页的那个节点。",
    " Walk down from start page by page, as a match does. Where the tokens part from a node "
    "inside it, the node is split there and the rest of the tokens hang below the upper part; "
    "where no child begins with the next page's tokens, all the rest becomes one new leaf (its "
    "children key: the tokens of its first page).":
        "从 start 出发，像匹配那样一页一页往下走。token 在某个节点内部与它分叉时，就在那里"
        "分裂该节点，其余的 token 挂在上层部分之下；没有任何子节点以下一页的 token 开头时，"
        "剩下的全部 token 成为一个新的叶子节点（它在 children 中的键：它第一页的 token）。",
    " A split keeps the node object for the *lower* part (the rest of its pages and its "
    "children): requests that ended at that node must still end there.":
        "分裂时，原来的节点对象留给*下层*部分（它其余的页和它的子节点）：终止于该节点的请求"
        "必须仍然终止在那里。",
    " The tree takes one reference on each page it adds, marked as the tree's own "
    "(allocator.share(..., cache=True)), and none on pages it held already.":
        "树对它加入的每一页各获取一个引用，并标记为树自己的引用"
        "（allocator.share(..., cache=True)）；对它原本就持有的页，则不再获取引用。",
    " Every node the inserted tokens pass through, start included, is used now: its last_used "
    "becomes next(cache._clock) (once per call).":
        "插入的 token 途经的每个节点（包括 start）都在此刻被使用：它的 last_used 变成 "
        "next(cache._clock)（每次调用只取一次）。",
    " The tree counts the pages it holds in cache.num_pages: the pages of a new leaf join the "
    "count (a split moves pages, it adds none).":
        "树把它持有的页数记在 cache.num_pages 中：新叶子节点的页要计入（分裂只是挪动页，"
        "并不增加页）。",
    " The caller shares the pages insert returns where they differ from its own.":
        "insert 返回的页与调用者自己的页不同时，调用者会改为共享返回的页。",
    "new prompts become new leaves; returns the pages the tree holds and the node where they "
    "end":
        "新的提示词成为新的叶子节点；返回树持有的页，以及它们终止的节点",
    "tokens the tree holds keep the tree's pages; only new pages join, with one reference each":
        "树中已有的 token 沿用树自己的页；只有新的页加入，并各带一个引用",
    "splits a node where the new tokens part from it inside it":
        "新 token 在某个节点内部与它分叉时，分裂该节点",
    "two requests at once, page size {S}": "两个请求同时进行，页大小 {S}",
    "continues below start, the node a request reached before":
        "从 start（请求先前到达的节点）之下继续",
    "equals the engine's RadixCache.insert over random request streams (page sizes 1, 2, 3, 4 "
    "and 16)":
        "在随机请求流上与引擎的 RadixCache.insert 结果一致（页大小 1、2、3、4 和 16）",
    "{n} inserts over 5 streams, as the engine's": "5 条请求流上共 {n} 次插入，与引擎的一致",
    # evict.py
    " Whole leaves go, least recently used first, until at least num_pages pages are freed or "
    "no leaf may go; the answer is the number of pages freed.":
        "驱逐以整个叶子节点为单位，最近最少使用的优先，直到至少释放了 num_pages 页，或者再"
        "没有叶子节点可以驱逐；返回值是释放的页数。",
    " Only a leaf may go (a node with children is the prefix of theirs), and only one whose "
    "pages nobody but the tree holds (a reference count of 1). The leaf that goes first is the "
    "one used longest ago; when a leaf goes, its parent may become a leaf, and it then waits "
    "its turn by its own last_used.":
        "只有叶子节点可以被驱逐（有子节点的节点是其子节点的前缀），而且它的页除了树之外无人"
        "持有（引用计数为 1）。最先被驱逐的是最久没有用过的叶子节点；一个叶子节点被驱逐后，"
        "它的父节点可能成为叶子节点，随后按自己的 last_used 排队等候。",
    " Evicting a node a running request ends at takes pages it still uses.":
        "驱逐一个运行中请求所终止的节点，会拿走该请求仍在使用的页。",
    " The tree lets go of its own reference on each page of a leaf it evicts, marked as the "
    "tree's (allocator.free(..., cache=True)); the allocator then counts the page as free, not "
    "as evictable.":
        "树驱逐一个叶子节点时，放掉它对其中每一页持有的那个引用，并标记为树的引用"
        "（allocator.free(..., cache=True)）；这样分配器才会把这一页算作空闲，而不是可驱逐。",
    " A page a running request holds was lent again while it still held it: an evicted leaf "
    "had pages with more than one holder.":
        "一个运行中请求持有的页，在它仍持有时又被借了出去：某个被驱逐的叶子节点里有不止一个"
        "持有者的页。",
    " The tree counts the pages it holds in cache.num_pages: an evicted leaf's pages leave the "
    "count.":
        "树把它持有的页数记在 cache.num_pages 中：被驱逐的叶子节点的页要从中减去。",
    " The allocator calls evict when its free list runs out, and then takes pages from the "
    "free list: they must be there.":
        "分配器在空闲链表耗尽时调用 evict，随后就从空闲链表中取页：这些页必须已经在那里。",
    "frees whole leaves until at least num_pages pages are free; returns how many (0 when "
    "nothing may go)":
        "以整个叶子节点为单位释放，直到至少释放 num_pages 页；返回释放的页数（没有节点可以"
        "驱逐时为 0）",
    "never evicts a page that a request still holds": "绝不驱逐仍有请求持有的页",
    "least recently used leaf first; a parent left without children waits its turn by its own "
    "last use":
        "最近最少使用的叶子节点优先；失去所有子节点的父节点，按自己最近一次被使用的时刻排队",
    "a tight pool: allocate() calls it when its free list runs out (random request streams, "
    "page sizes 1, 2, 3 and 4)":
        "紧张的缓存池：空闲链表耗尽时由 allocate() 调用它（随机请求流，页大小 1、2、3 和 4）",
    "a random stream, page size {S}, {pool} pages": "一条随机请求流，页大小 {S}，共 {pool} 页",
    "{n} evictions over 4 streams, as the engine's": "4 条请求流上共 {n} 次驱逐，与引擎的一致",
    # capstone.py
    "page size {S}: the engine with your tree failed with {error}: {text}":
        "页大小 {S}：用上你的树的引擎出错，抛出 {error}：{text}",
    "tiny with your tree (page sizes 4 and 1, a tight pool): the same tokens as with the cache "
    "off, logprobs within 1e-5":
        "tiny 用上你的树（页大小 4 和 1，紧张的缓存池）：生成的 token 与关闭缓存时相同，"
        "对数概率相差不超过 1e-5",
    "pass the class itself, a subclass of RadixCache; got {cls!r}":
        "请传入类本身，即 RadixCache 的一个子类；实际传入的是 {cls!r}",
    "The first token is sampled from the logits of the prompt's last token, which must be "
    "computed in this request, not found in the tree.":
        "第一个 token 是从提示词最后一个 token 的 logits 中采样的，而这个 token 必须在本请求"
        "中计算，不能从树中取得。",
    "Pages shared from the tree must hold exactly the K/V of the tokens they stand for.":
        "从树中共享的页，存放的必须恰好是它们所代表的那些 token 的 K/V。",
    "page size {S}, request {i} (a prompt of {n} tokens, {cached} of them from your tree): "
    "{got} instead of {want}, from token {k} on. {hint}":
        "页大小 {S}，请求 {i}（提示词共 {n} 个 token，其中 {cached} 个来自你的树）：生成了 "
        "{got}，应为 {want}，从 token {k} 起出现差异。{hint}",
    "page size {S}, request {i}: logprobs differ from the cache-off run's by {diff:.1e} (more "
    "than 1e-5)":
        "页大小 {S}，请求 {i}：对数概率与关闭缓存时的结果相差 {diff:.1e}（超过 1e-5）",
    "{n} requests, the same tokens": "{n} 个请求，token 完全相同",
    "the tree is used: prompts that share a prefix report cached tokens, and fewer prompt "
    "tokens are computed":
        "树确实被用上了：共享前缀的提示词报告了命中缓存的 token，需要计算的提示词 token 也"
        "更少",
    "page size {S}: no request found any of its prompt in your tree (cached_tokens is 0 "
    "everywhere), though most share a prefix":
        "页大小 {S}：没有一个请求在你的树中找到自己提示词的任何部分（cached_tokens 处处为 0），"
        "尽管大多数请求共享前缀",
    "page size {S}: a request reports cached tokens that are not whole pages":
        "页大小 {S}：有请求报告的缓存 token 数不是整页",
    "page size {S}: the engine computed every prompt token again":
        "页大小 {S}：引擎把每个提示词 token 都重新计算了一遍",
    "page size {S}: {cached} of {prompt} prompt tokens from the tree":
        "页大小 {S}：{prompt} 个提示词 token 中有 {cached} 个来自树",
    "; ": "；",
    "when the engine is idle every page is free or evictable, and reset_prefix_cache() gives "
    "them all back":
        "引擎空闲时，每一页要么空闲、要么可驱逐，而 reset_prefix_cache() 会把它们全部归还",
    "page size {S}: the pool of {P} pages ran out, yet evict freed no page":
        "页大小 {S}：{P} 页的缓存池已经用尽，evict 却一页也没有释放",
    "page size {S}: idle, yet only {free} of {total} pages are free or evictable: some page "
    "still has a holder besides the tree":
        "页大小 {S}：引擎已经空闲，{total} 页中却只有 {free} 页空闲或可驱逐：有的页除了树之外"
        "还有别的持有者",
    "page size {S}: after reset_prefix_cache() {free} of {total} pages are on the free list; "
    "evicting everything should give every page back":
        "页大小 {S}：调用 reset_prefix_cache() 之后，{total} 页中只有 {free} 页在空闲链表上；"
        "全部驱逐之后，每一页都应当归还",
    "its match, insert and evict call your match_prefix, insert and evict":
        "它的 match、insert 和 evict 调用你的 match_prefix、insert 和 evict",
    "your class keeps the engine's {methods}: override each with a method that calls your own "
    "function":
        "你的类沿用了引擎的 {methods}：请逐一重写，让每个方法调用你自己的函数",
    "the engine ran, but your {functions} was never called: each method should hand its work "
    "to your function of the same job":
        "引擎运行了，但你的 {functions} 从未被调用：每个方法都应当把工作交给你写的、负责同一"
        "项工作的函数",
}
