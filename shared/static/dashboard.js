"use strict";
// The operator's page: reads the app's own HTTP API (relative to this page) every few seconds and draws it.
// The function key it was opened with (?code=) goes only into the x-functions-key header of those calls:
// it is never stored, never written into the page, never logged.
(() => {
  const query = new URLSearchParams(window.location.search);
  const key = query.get("code");
  const everyS = Math.min(60, Math.max(1, Number(query.get("refresh")) || 5));
  const BATCHES = 10;
  const number = new Intl.NumberFormat("en-US");
  const decimal = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, options = {}) {
    const headers = { Accept: "application/json", ...(options.headers || {}) };
    if (key) headers["x-functions-key"] = key;
    let response;
    try {
      response = await fetch(path, { ...options, headers, cache: "no-store", credentials: "omit" });
    } catch (e) {
      throw new ApiError(0, "the app did not answer (" + e.message + ")");
    }
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      const problem = body && body.error && body.error.message ? body.error.message : response.statusText;
      throw new ApiError(response.status, response.status + " " + (problem || "error"));
    }
    return body || {};
  }

  // -- small DOM helpers (textContent only: nothing from the API is ever parsed as HTML) -----------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    for (const child of children.flat(Infinity)) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function section(id) {
    const root = document.getElementById(id);
    return { body: root.querySelector("[data-body]"), error: root.querySelector("[data-error]") };
  }

  function show(id, content) {
    const { body, error } = section(id);
    error.hidden = true;
    error.textContent = "";
    body.replaceChildren(...[content].flat(Infinity).filter((node) => node !== null && node !== undefined));
  }

  function failed(id, e) {
    const { body, error } = section(id);
    if (body.querySelector(".empty") && body.textContent.trim() === "Loading…") body.replaceChildren();
    error.hidden = false;
    error.textContent = "Could not refresh: " + e.message + (e.status === 401 ? "" : " (trying again)");
  }

  const count = (n) => (typeof n === "number" && isFinite(n) ? number.format(n) : "–");
  const short = (id) => String(id || "").slice(0, 8);

  function duration(ms) {
    if (typeof ms !== "number" || !isFinite(ms)) return "–";
    const s = ms / 1000;
    if (Math.abs(s) < 1) return Math.round(ms) + " ms";
    if (Math.abs(s) < 90) return decimal.format(s) + " s";
    if (Math.abs(s) < 5400) return decimal.format(s / 60) + " min";
    return decimal.format(s / 3600) + " h";
  }

  function clock(iso) {
    if (!iso) return "–";
    const at = new Date(iso);
    return isNaN(at) ? "–" : at.toLocaleTimeString("en-GB", { hour12: false });
  }

  // -- queues ---------------------------------------------------------------------------------------------

  function cell(label, value, cls) {
    return el("td", { "data-label": label, class: cls }, value);
  }

  function nextLook(chain) {
    if (!chain || typeof chain.armed !== "boolean") return "–";
    if (!chain.armed) return "none while empty (the timer is the net)";
    const ms = chain.next_look_in_ms;
    return typeof ms === "number" && ms > 0 ? "in " + duration(ms) : "due now";
  }

  function renderTenants(view) {
    const depths = new Map((Array.isArray(view.tenants) ? view.tenants : []).map((t) => [t.tenant, t.depth]));
    const quotas = view.quotas || {};
    const limits = quotas.limits || {};
    const use = new Map((Array.isArray(quotas.tenants) ? quotas.tenants : []).map((u) => [u.tenant, u]));
    const names = [...new Set([...depths.keys(), ...use.keys()])].sort();
    if (!names.length) return null;
    const of = (n, most) => count(n || 0) + (most ? " of " + count(most) : "");
    const head = ["Tenant", "Depth", "Pending items", "Submits this minute"];
    return el(
      "table",
      { class: "cards tenants" },
      el("caption", { class: "note", text: "Each tenant's lanes and its use of its quotas (of: the limit; none shown when unset)." }),
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: i ? "num" : null, text: h })))),
      el(
        "tbody",
        {},
        names.map((name) => {
          const mine = use.get(name) || {};
          return el(
            "tr",
            {},
            cell(head[0], el("code", { text: name })),
            cell(head[1], count(depths.get(name) || 0), "num"),
            cell(head[2], of(mine.pending_items, limits.max_pending_items), "num"),
            cell(head[3], of(mine.submits_this_minute, limits.max_submits_per_min), "num"),
          );
        }),
      ),
    );
  }

  function renderQueues(view) {
    const partitions = Array.isArray(view.partitions) ? view.partitions : [];
    if (!partitions.length) return el("p", { class: "empty", text: "No work queues." });
    return el("div", {}, renderPartitions(partitions), renderTenants(view));
  }

  function renderPartitions(partitions) {
    const head = ["Queue", "Depth", "Poison", "Active drainers", "Fallback back-off", "Next look"];
    const numeric = new Set([1, 2, 3]);
    return el(
      "table",
      { class: "cards" },
      el("caption", { class: "note", text: "Depth is approximate (the queue's own count); drainers hold a lease each." }),
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: numeric.has(i) ? "num" : null, text: h })))),
      el(
        "tbody",
        {},
        partitions.map((p) => {
          const backoff = p.fallback_backoff || {};
          const looks = backoff.idle_count;
          const idle = typeof looks === "number" ? ` (${count(looks)} empty look${looks === 1 ? "" : "s"})` : "";
          return el(
            "tr",
            {},
            cell(head[0], el("code", { text: p.queue })),
            cell(head[1], count(p.depth), "num"),
            cell(head[2], count(p.poison_depth), "num"),
            cell(head[3], count(p.active_drainers), "num"),
            cell(head[4], "every " + duration(backoff.interval_ms) + idle),
            cell(head[5], nextLook(p.look_chain)),
          );
        }),
      ),
    );
  }

  // -- batches --------------------------------------------------------------------------------------------

  const STATE_TEXT = {
    completed: "✓ completed",
    completed_with_failures: "✗ completed with failures",
    processing: "↻ processing",
    accepted: "… accepted, waiting",
    scheduled: "◷ scheduled, waits for its start",
    ended: "■ ended early",
  };
  const CANCELLABLE = new Set(["accepted", "scheduled", "processing"]);

  function progressBar(batch) {
    const items = batch.items || {};
    const total = Math.max(0, items.total || 0);
    const ok = Math.max(0, items.succeeded || 0);
    const bad = Math.max(0, items.failed || 0);
    const pending = Math.max(0, items.pending ?? total - ok - bad);
    const settled = Math.min(total, ok + bad);
    // Floored, so 100% means every item is settled.
    const pct = total ? Math.floor((settled * 100) / total) : 100;
    const share = (n) => (total ? (n * 100) / total : 0);
    const words = `${pct}% settled: ${count(ok)} succeeded, ${count(bad)} failed, ${count(pending)} pending of ${count(total)}`;
    const bar = el(
      "div",
      {
        class: "bar",
        role: "progressbar",
        "aria-label": "Batch " + short(batch.batch_id) + " progress",
        "aria-valuemin": 0,
        "aria-valuemax": 100,
        "aria-valuenow": pct,
        "aria-valuetext": words,
      },
      el("span", { class: "ok" }),
      el("span", { class: "failed" }),
      el("span", { class: "pending" }),
    );
    const [okPart, badPart] = bar.children;
    okPart.style.width = share(ok) + "%";
    badPart.style.width = share(bad) + "%";
    const counts = el(
      "p",
      { class: "counts" },
      el("span", { class: "pct", text: pct + "%" }),
      ` · ${count(ok)} succeeded · ${count(bad)} failed · ${count(pending)} pending of ${count(total)}`,
    );
    return [bar, counts];
  }

  function stat(label, value) {
    return el("div", {}, el("dt", { text: label }), el("dd", { text: value }));
  }

  function renderBatch(batch) {
    const status = String(batch.status || "unknown");
    const rate = typeof batch.items_per_s === "number" ? decimal.format(batch.items_per_s) + " items/s" : "–";
    const left =
      status.startsWith("completed") ? "done" : typeof batch.eta_s === "number" ? "about " + duration(batch.eta_s * 1000) : "–";
    return el(
      "li",
      {},
      el(
        "article",
        { class: "batch", "data-batch": batch.batch_id, "aria-label": "Batch " + batch.batch_id },
        el(
          "header",
          {},
          el("h3", {}, "Batch ", el("code", { title: batch.batch_id, text: short(batch.batch_id) })),
          el("span", { class: "state " + status, text: STATE_TEXT[status] || status }),
        ),
        progressBar(batch),
        el(
          "dl",
          { class: "stats" },
          stat("Rate", rate),
          stat("Time left", left),
          stat("Accepted", clock(batch.accepted_at)),
          stat("Wake", typeof batch.wake_ms === "number" ? duration(batch.wake_ms) : "–"),
          stat("Chunks", count((batch.chunks || {}).total) + (batch.chunks && batch.chunks.poisoned ? `, ${count(batch.chunks.poisoned)} with parked items` : "")),
        ),
        CANCELLABLE.has(status) ? cancelButton(batch) : null,
      ),
    );
  }

  // -- cancelling a batch ---------------------------------------------------------------------------------

  const cancelDialog = document.getElementById("confirm-cancel");
  const cancelAnswer = document.getElementById("cancel-answer");

  function cancelButton(batch) {
    const button = el("button", { type: "button", class: "cancel-batch", text: "Cancel batch" });
    button.addEventListener("click", () => cancelBatch(batch, button));
    return button;
  }

  async function cancelBatch(batch, button) {
    document.getElementById("confirm-cancel-text").textContent =
      `Batch ${short(batch.batch_id)}: ${count((batch.items || {}).pending)} of ${count((batch.items || {}).total)} item(s) still pending.`;
    cancelDialog.returnValue = "";
    cancelDialog.showModal();
    const yes = await new Promise((resolve) =>
      cancelDialog.addEventListener("close", () => resolve(cancelDialog.returnValue === "cancel-batch"), { once: true }),
    );
    if (!yes) {
      cancelAnswer.textContent = "Nothing was cancelled.";
      return;
    }
    button.disabled = true;
    try {
      const done = await api("batches/" + encodeURIComponent(batch.batch_id) + "/cancel", { method: "POST" });
      const items = done.items || {};
      cancelAnswer.textContent =
        `Batch ${short(batch.batch_id)} is ${done.status}: ${count(items.succeeded)} succeeded, ` +
        `${count(items.failed)} failed, ${count(items.cancelled || 0)} cancelled.`;
    } catch (e) {
      cancelAnswer.textContent = "Cancel failed: " + e.message;
      button.disabled = false;
    }
    refresh();
  }

  function renderBatches(page) {
    const batches = Array.isArray(page.batches) ? page.batches : [];
    if (!batches.length) return el("p", { class: "empty", text: "No batch accepted yet." });
    const legend = el(
      "ul",
      { class: "legend", "aria-label": "Bar legend" },
      el("li", {}, el("span", { class: "swatch ok", "aria-hidden": "true" }), "succeeded"),
      el("li", {}, el("span", { class: "swatch failed", "aria-hidden": "true" }), "failed (striped)"),
      el("li", {}, el("span", { class: "swatch pending", "aria-hidden": "true" }), "pending"),
    );
    const note = el("p", { class: "note", text: "Rate: items settled per second since the batch was accepted; time left: pending items at that rate." });
    return [legend, el("ol", { class: "batch-list" }, batches.map(renderBatch)), note];
  }

  // -- wake latency chart ---------------------------------------------------------------------------------

  function renderWake(page) {
    const points = (Array.isArray(page.batches) ? page.batches : [])
      .filter((b) => typeof b.wake_ms === "number")
      .reverse(); // oldest on the left
    if (!points.length) return el("p", { class: "empty", text: "No batch has a first result yet." });
    const width = 420, height = 190, left = 46, right = 8, top = 18, bottom = 34;
    const most = Math.max(1, ...points.map((p) => p.wake_ms));
    const scale = (v) => ((height - top - bottom) * Math.max(0, v)) / most;
    const step = (width - left - right) / points.length;
    const barWidth = Math.min(36, step * 0.7);
    const ys = [0, most / 2, most];
    const summary = points.map((p) => `batch ${short(p.batch_id)}: ${duration(p.wake_ms)}`).join("; ");
    const chart = svg(
      "svg",
      { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-labelledby": "wake-title wake-desc" },
      svg("title", { id: "wake-title" }, "Wake latency of the recent batches, oldest first"),
      svg("desc", { id: "wake-desc" }, summary),
      ys.map((v) => {
        const y = height - bottom - scale(v);
        return [
          svg("line", { class: "grid", x1: left, x2: width - right, y1: y, y2: y }),
          svg("text", { x: left - 4, y: y + 4, "text-anchor": "end" }, duration(v)),
        ];
      }),
      svg("line", { class: "axis", x1: left, x2: left, y1: top - 6, y2: height - bottom }),
      points.map((p, i) => {
        const x = left + step * i + (step - barWidth) / 2;
        const h = Math.max(1, scale(p.wake_ms));
        const y = height - bottom - h;
        return svg(
          "g",
          {},
          svg("rect", { class: "bar-wake", x, y, width: barWidth, height: h }, svg("title", {}, `batch ${p.batch_id}: ${duration(p.wake_ms)}`)),
          svg("text", { x: x + barWidth / 2, y: y - 4, "text-anchor": "middle" }, duration(p.wake_ms)),
          svg("text", { x: x + barWidth / 2, y: height - bottom + 14, "text-anchor": "middle" }, short(p.batch_id).slice(0, 4)),
        );
      }),
      svg("text", { x: left + (width - left - right) / 2, y: height - 4, "text-anchor": "middle" }, "batch (first 4 characters of its id)"),
    );
    return chart;
  }

  // -- cost -----------------------------------------------------------------------------------------------

  function renderCost(view) {
    const t = view.storage_transactions || {};
    const work = t.work || { total: t.total, by_operation: t.by_operation || {} };
    const reads = (t.reads && t.reads.by_operation) || {};
    const builtin = (t.builtin_queue_trigger || {}).total;
    const items = t.items_settled;
    const parts = [];
    if (typeof builtin === "number" && typeof work.total === "number") {
      const most = Math.max(1, builtin, work.total);
      const row = (label, value, cls, text) => {
        const fill = el("div", { class: "fill " + cls });
        fill.style.width = (value * 100) / most + "%";
        return el("div", { class: "row" }, el("span", { class: "label", text: label }), el("div", { class: "track" }, fill, el("span", { class: "value", text })));
      };
      parts.push(
        el(
          "div",
          { class: "versus", role: "group", "aria-label": "This app against the built-in queue trigger" },
          row("This app (work)", work.total, "app", count(work.total) + " transactions"),
          row("Built-in queue trigger", builtin, "builtin", "at least " + count(builtin)),
        ),
      );
      const saving =
        typeof t.ratio === "number"
          ? `${decimal.format(t.ratio)}× fewer than the built-in trigger for the same ${count(items)} items`
          : items
            ? "Nothing spent yet"
            : "No item settled by this process yet: nothing to compare";
      parts.push(el("p", { class: "saving", text: saving }));
    }
    const operations = [...new Set([...Object.keys(work.by_operation || {}), ...Object.keys(reads)])].sort();
    parts.push(
      el(
        "table",
        {},
        el("caption", { class: "note", text: "By operation, as each request was sent (every retry counted)" }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Operation" }), el("th", { scope: "col", class: "num", text: "Work" }), el("th", { scope: "col", class: "num", text: "API reads" }))),
        el(
          "tbody",
          {},
          operations.map((op) =>
            el("tr", {}, el("td", {}, el("code", { text: op })), el("td", { class: "num", text: count((work.by_operation || {})[op] || 0) }), el("td", { class: "num", text: count(reads[op] || 0) })),
          ),
          el("tr", {}, el("th", { scope: "row", text: "Total" }), el("td", { class: "num", text: count(work.total) }), el("td", { class: "num", text: count((t.reads || {}).total) })),
        ),
      ),
    );
    parts.push(
      el(
        "p",
        { class: "note" },
        `Counted by this app process since ${clock(t.since)} (each instance in Azure counts its own). ` +
          "Work: every storage request but those made to answer API reads (this page's refreshes are API reads). " +
          `Items: ${count(items)} settled (succeeded or parked) by this process's drainers, counted as each result is recorded. ` +
          "Built-in queue trigger: 2.0625 transactions per item (enqueue, delete and 1/16 of a GetMessages of 16), " +
          "leaving out its idle polling and retries, so at least that. Neither side includes the Functions host's own storage traffic.",
      ),
    );
    return parts;
  }

  // -- parked chunks and replay ---------------------------------------------------------------------------

  const dialog = document.getElementById("confirm");
  const answer = document.getElementById("replay-answer");

  function confirmReplay(chunk) {
    document.getElementById("confirm-text").textContent =
      `Chunk ${chunk.chunk} of batch ${short(chunk.batch_id)}: ${count(chunk.failed)} failed item(s), ` +
      `parked after attempt ${chunk.attempt} because: ${chunk.reason}`;
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "replay"), { once: true }));
  }

  async function replay(chunk, button) {
    if (!(await confirmReplay(chunk))) {
      answer.textContent = "Replay cancelled: nothing was changed.";
      return;
    }
    button.disabled = true;
    answer.textContent = `Replaying chunk ${chunk.chunk} of batch ${short(chunk.batch_id)}…`;
    try {
      const done = await api("poison/replay", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ message_ids: [chunk.message_id] }),
      });
      const skipped = Array.isArray(done.skipped) ? done.skipped : [];
      answer.textContent =
        `Replayed ${count(done.replayed)} chunk(s), skipped ${count(skipped.length)}` +
        (skipped.length ? ": " + skipped.map((s) => s.why || s.reason).join("; ") : ".") +
        (done.replayed
          ? " It is back on its work queue."
          : done.set_aside
            ? " Its batch is final, so it was set aside, not replayed: submit its items again as a new batch."
            : " It was no longer parked (replayed already?).");
    } catch (e) {
      answer.textContent = "Replay failed: " + e.message;
      button.disabled = false;
    }
    refresh();
  }

  let parkedPage = null; // the parked listing's page shown: null for the newest

  function renderParked(listing) {
    const partitions = Array.isArray(listing.partitions) ? listing.partitions : [];
    // Newest first, a page at a time, from the index (every parked chunk); older hosts answer only each partition's first page.
    const chunks = Array.isArray(listing.parked)
      ? listing.parked
      : partitions.flatMap((p) => (Array.isArray(p.first) ? p.first : Array.isArray(p.chunks) ? p.chunks : []));
    const depth = partitions.reduce((n, p) => n + (typeof p.depth === "number" ? p.depth : 0), 0);
    if (!chunks.length) return el("p", { class: "empty", text: depth ? `${count(depth)} parked, none readable yet.` : "Nothing is parked." });
    const head = ["Batch", "Chunk", "Failed items", "Attempt", "Reason", "Parked at", "Action"];
    const table = el(
      "table",
      { class: "cards" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))),
      el(
        "tbody",
        {},
        chunks.map((c) => {
          const button = el("button", { type: "button", disabled: !c.replayable, text: "Replay…" });
          button.setAttribute("aria-label", `Replay chunk ${c.chunk} of batch ${short(c.batch_id)}`);
          button.addEventListener("click", () => replay(c, button));
          return el(
            "tr",
            { "data-message": c.message_id },
            cell(head[0], el("code", { title: c.batch_id || "", text: c.batch_id ? short(c.batch_id) : "–" })),
            cell(head[1], c.chunk ?? "–", "num"),
            cell(head[2], count(c.failed), "num"),
            cell(head[3], c.attempt ?? "–", "num"),
            cell(head[4], String(c.reason || "–"), "reason"),
            cell(head[5], clock(c.inserted_on)),
            cell(head[6], c.replayable ? button : "not a chunk: inspect it by hand"),
          );
        }),
      ),
    );
    const shown = depth > chunks.length ? el("p", { class: "note", text: `Showing ${count(chunks.length)} of ${count(depth)} parked, newest first.` }) : null;
    const pager = el("p", { class: "note" });
    if (parkedPage) {
      const newest = el("button", { type: "button", text: "Newest" });
      newest.addEventListener("click", () => { parkedPage = null; refresh(); });
      pager.append(newest, " ");
    }
    if (listing.continuation) {
      const older = el("button", { type: "button", text: "Older parked chunks" });
      older.addEventListener("click", () => { parkedPage = listing.continuation; refresh(); });
      pager.append(older);
    }
    return [table, shown, pager];
  }

  // -- refresh loop ---------------------------------------------------------------------------------------

  let timer = null;
  let unauthorized = false;
  let generation = 0; // a replay refreshes at once: only the newest refresh schedules the next

  function refused(results) {
    return results.some((r) => r.status === "rejected" && r.reason && r.reason.status === 401);
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = ++generation;
    const [queues, batches, parked] = await Promise.allSettled([api("queues"), api(`batches?limit=${BATCHES}`), api(parkedPage ? `poison?continuation=${encodeURIComponent(parkedPage)}` : "poison")]);
    if (mine !== generation) return;
    unauthorized = refused([queues, batches, parked]);
    document.getElementById("auth").hidden = !unauthorized;
    const put = (result, ids, draw) => {
      for (const [id, render] of ids.map((id, i) => [id, draw[i]])) {
        if (result.status === "fulfilled") show(id, render(result.value));
        else failed(id, result.reason);
      }
    };
    put(queues, ["queues", "cost"], [renderQueues, renderCost]);
    put(batches, ["batches", "wake"], [renderBatches, renderWake]);
    put(parked, ["parked"], [renderParked]);
    const status = document.getElementById("updated");
    if (unauthorized) {
      status.textContent = "401 Unauthorized: not refreshing (see above)";
      return; // nothing to gain from asking again with the same key
    }
    status.textContent = `Updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })} · refreshes every ${everyS} s`;
    timer = setTimeout(tick, everyS * 1000);
  }

  function tick() {
    if (document.hidden) return; // resumed by visibilitychange: a hidden page costs no reads
    refresh();
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !unauthorized) refresh();
  });
  refresh();
})();
