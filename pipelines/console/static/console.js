// The console's one script: keeps live parts fresh, holds the action token, takes actions through the
// JSON API. It never builds markup from data: live parts come rendered (and escaped) by the server,
// and messages are set as text.
"use strict";

const TOKEN_KEY = "pipelines-console-token";
const refreshMs = Number(document.body.dataset.refreshMs || 2000);

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function showTokenState() {
  const state = document.getElementById("token-state");
  const input = document.getElementById("token-input");
  if (!state) return;
  if (token()) {
    state.textContent = "Actions unlocked";
    state.classList.add("on");
    input.placeholder = "Change token";
  } else {
    state.textContent = document.body.dataset.actions === "off" ? "Actions disabled" : "Actions locked";
    state.classList.remove("on");
  }
}

function flash(text, kind) {
  const box = document.getElementById("flash");
  box.textContent = text;
  box.className = "flash " + (kind || "ok");
  box.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { box.hidden = true; }, kind === "bad" ? 12000 : 5000);
}

// -- live parts ------------------------------------------------------------------------------------

const regions = [];

async function refresh(region) {
  if (region.busy) return;
  region.busy = true;
  try {
    const url = region.dataset.live + (region.dataset.live.includes("?") ? "&" : "?") + "partial=1";
    const response = await fetch(url, { headers: { "Accept": "text/html" }, cache: "no-store" });
    if (response.ok) {
      const html = await response.text();
      // a question asked while this refresh was under way stays until it is answered
      if (html !== region.lastHtml && !waitingForConfirmation(region)) {
        region.innerHTML = html; // rendered and escaped by the server
        region.lastHtml = html;
      }
      region.classList.remove("stale");
    } else {
      region.classList.add("stale");
    }
  } catch (e) {
    region.classList.add("stale");
  } finally {
    region.busy = false;
  }
}

function finished(region) {
  return region.querySelector("[data-final]") !== null;
}

function waitingForConfirmation(region) {
  return region.querySelector(".confirm") !== null; // a refresh would take the question away
}

function tick() {
  if (document.hidden) return;
  const now = Date.now();
  for (const region of regions) {
    const every = refreshMs * Number(region.dataset.every || 1);
    if (!finished(region) && !waitingForConfirmation(region) && now - (region.lastTick || 0) >= every) {
      region.lastTick = now;
      refresh(region);
    }
  }
}

// -- actions ---------------------------------------------------------------------------------------

async function post(button) {
  if (!token()) {
    flash("This action needs the console's token: enter it at the top right.", "bad");
    document.getElementById("token-input").focus();
    return;
  }
  button.disabled = true;
  let answer = {};
  let response;
  try {
    response = await fetch(button.dataset.post, {
      method: "POST",
      headers: { "Authorization": "Bearer " + token(), "Content-Type": "application/json" },
      body: button.dataset.body || "{}",
    });
    answer = await response.json().catch(() => ({}));
  } catch (e) {
    flash("The console did not answer: " + e, "bad");
    button.disabled = false;
    return;
  }
  button.disabled = false;
  if (!response.ok) {
    if (response.status === 401) sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    flash("Refused (" + response.status + "): " + (answer.error || response.statusText), "bad");
    return;
  }
  flash(summary(button.dataset.done || "Done.", answer), "ok");
  if (button.dataset.then) {
    window.location.assign(button.dataset.then);
    return;
  }
  if (answer.rerun_id) {  // a re-run opens the new run's page
    window.location.assign("/runs/" + encodeURIComponent(answer.rerun_id));
    return;
  }
  for (const region of regions) refresh(region);
}

function letters(count) {
  return count + (count === 1 ? " dead letter" : " dead letters");
}

function summary(done, answer) {
  if (answer.outcome) return done + " " + answer.outcome + ".";
  if (answer.outcomes) {
    const values = Object.values(answer.outcomes);
    const failed = values.filter((v) => v.startsWith("not replayed"));
    return done + " " + letters(values.length) + (failed.length ? ", " + failed.length + " not: " + failed[0] : "") + ".";
  }
  if (typeof answer.purged === "number") return done + " " + letters(answer.purged) + " deleted.";
  if (typeof answer.cancelled === "boolean") return answer.cancelled ? done : "The run had already ended (" + answer.state + ").";
  return done;
}

function confirmFirst(button) {
  const box = document.createElement("span");
  box.className = "confirm";
  const text = document.createElement("span");
  text.textContent = button.dataset.confirm;
  const yes = document.createElement("button");
  yes.className = button.classList.contains("danger") ? "danger" : "";
  yes.textContent = button.dataset.confirmLabel || "Yes";
  const no = document.createElement("button");
  no.textContent = "No";
  box.append(text, yes, no);
  button.hidden = true;
  button.after(box);
  const close = () => { box.remove(); button.hidden = false; };
  no.addEventListener("click", close);
  yes.addEventListener("click", () => { close(); post(button); });
  yes.focus();
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-post]");
  if (!button) return;
  event.preventDefault();
  if (button.dataset.confirm) confirmFirst(button); else post(button);
});

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token-input");
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    showTokenState();
  });
  showTokenState();
  for (const region of document.querySelectorAll("[data-live]")) {
    region.lastTick = Date.now();
    regions.push(region);
  }
  setInterval(tick, 250);
  document.addEventListener("visibilitychange", tick);
});
