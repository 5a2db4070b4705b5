// berth console: live counts by short polling, filter-as-you-type. No
// dependencies; every page works without it.
"use strict";
(function () {
  const refresh = Number(document.body.dataset.refresh) || 5000;

  // Filter table rows by name as the user types.
  document.querySelectorAll("[data-filter-rows]").forEach(function (input) {
    const apply = function () {
      const q = input.value.trim().toLowerCase();
      document.querySelectorAll(input.dataset.filterRows).forEach(function (tr) {
        if (!tr.dataset.name) return;
        tr.hidden = q !== "" && !tr.dataset.name.toLowerCase().includes(q);
      });
    };
    input.addEventListener("input", apply);
  });

  // Copy buttons copy the text of the element data-copy names; they show
  // only where the clipboard is available.
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    if (!navigator.clipboard) return;
    btn.hidden = false;
    btn.addEventListener("click", async function () {
      const el = document.querySelector(btn.dataset.copy);
      try {
        await navigator.clipboard.writeText(el ? el.textContent : "");
        btn.textContent = "Copied";
      } catch (e) {
        btn.textContent = "Copy failed";
      }
      setTimeout(function () { btn.textContent = "Copy"; }, 2000);
    });
  });

  // fmtAge is handlers.go's age: 42s, 17m, 5h 3m, 3d 4h.
  function fmtAge(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    const h = Math.floor(s / 3600);
    if (h < 48) return h + "h " + (Math.floor(s / 60) % 60) + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }
  function cells(q) {
    const rate = q.drained_per_minute < 0 ? "–" : (Math.round(q.drained_per_minute * 10) / 10) + "/min";
    return {
      ready: String(q.ready) + (q.ready_more ? "+" : ""), in_flight: String(q.in_flight) + (q.in_flight_more ? "+" : ""),
      delayed: String(q.delayed) + (q.delayed_more ? "+" : ""),
      dead_lettered: String(q.dead_lettered) + (q.dead_lettered_more ? "+" : ""), oldest: q.ready === 0 ? "–" : fmtAge(q.oldest_ready_seconds), rate: rate,
    };
  }
  function update(root, q) {
    const c = cells(q);
    const paused = root.querySelector('[data-field="paused"]');
    if (paused && "paused" in q) paused.hidden = !q.paused;
    Object.keys(c).forEach(function (k) {
      const el = root.querySelector('[data-field="' + k + '"]');
      if (!el) return;
      const link = el.querySelector("a");
      const target = link || el;
      if (target.textContent !== c[k]) target.textContent = c[k];
    });
  }
  // updateListener refreshes one row of the Fleet page; a listener that
  // started since the page loaded shows after a reload.
  function updateListener(table, l) {
    const tr = table.querySelector('tr[data-key="' + CSS.escape(l.instance + " " + l.name) + '"]');
    if (!tr) return;
    const set = function (field, text) {
      const el = tr.querySelector('[data-field="' + field + '"]');
      if (el && el.textContent !== text) el.textContent = text;
    };
    ["wave", "buffered", "in_flight", "batch_pending", "rebuilds"].forEach(function (k) { set(k, String(l[k])); });
    const t = tr.querySelector('[data-field="age"] time');
    if (t) t.textContent = fmtAge(l.age_seconds) + " ago";
    const st = tr.querySelector("[data-status]");
    if (st && st.dataset.status !== l.status) {
      st.dataset.status = l.status;
      st.className = "badge status-" + l.status;
      st.textContent = l.status;
    }
    tr.classList.toggle("stale", l.stale);
  }
  function stamp() {
    const el = document.getElementById("updated");
    if (el) el.textContent = "Updated " + new Date().toLocaleTimeString() + ".";
    const alert = document.getElementById("poll-error");
    if (alert) alert.hidden = true;
  }
  // stale says, above the figures, that they could not be refreshed and
  // since when: a failed poll never leaves old counts looking current.
  let lastGood = new Date();
  function stale(why) {
    let alert = document.getElementById("poll-error");
    if (!alert) {
      alert = document.createElement("p");
      alert.id = "poll-error";
      alert.className = "alert";
      alert.setAttribute("role", "alert");
      const h1 = document.querySelector("main h1");
      h1.insertAdjacentElement("afterend", alert);
    }
    alert.textContent = "Cannot refresh: " + why.replace(/\.?$/, ".") + " The figures below are from " + lastGood.toLocaleTimeString() + ".";
    alert.hidden = false;
  }

  const poller = document.querySelector("[data-poll]");
  if (!poller) return;
  const url = poller.dataset.poll;
  let busy = false;
  async function tick() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const res = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!res.ok) {
        const line = (await res.text()).trim().split("\n")[0].slice(0, 300);
        stale(line || res.status + " " + res.statusText);
        return;
      }
      const data = await res.json();
      if (data.listeners) {
        data.listeners.forEach(function (l) { updateListener(poller, l); });
      } else if (data.queues) {
        data.queues.forEach(function (q) {
          const tr = poller.querySelector('tr[data-queue="' + CSS.escape(q.name) + '"]');
          if (tr) update(tr, q);
        });
      } else if (data.queue) {
        update(poller, data.queue);
        const img = document.getElementById("history");
        if (img) img.src = img.src.split("?")[0] + "?t=" + Date.now();
      }
      stamp();
      lastGood = new Date();
    } catch (e) {
      stale("the console does not answer."); // the next tick tries again
    } finally {
      busy = false;
    }
  }
  setInterval(tick, refresh);
})();
