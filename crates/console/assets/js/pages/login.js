// Login: checks the credentials with GET /api/whoami before keeping them for the session.

import { api, basicAuthorization, signedInUser, signIn } from "../api.js";
import { el, field } from "../dom.js";

export async function render(main, context) {
  if (signedInUser()) {
    location.hash = "#/";
    return null;
  }
  const reason = sessionStorage.getItem("warren.loginReason");
  sessionStorage.removeItem("warren.loginReason");
  const message = el("p", { class: "error", role: "alert" }, reason || "");
  const username = el("input", { type: "text", name: "username", autocomplete: "username", required: true, autofocus: true });
  const password = el("input", { type: "password", name: "password", autocomplete: "current-password" });
  const button = el("button", { type: "submit" }, "Log in");
  const form = el(
    "form",
    { class: "panel login", "aria-label": "Log in" },
    el("h1", {}, "Warren management"),
    field("Username", username),
    field("Password", password),
    button,
    message,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    message.textContent = "";
    const authorization = basicAuthorization(username.value, password.value);
    try {
      const me = await api("GET", "/whoami", undefined, { authorization });
      signIn(me.name || username.value, me.tags, authorization);
      window.dispatchEvent(new Event("warren:signed-in"));
      context.afterLogin();
    } catch (error) {
      message.textContent = error.status === 401 ? "Login failed: wrong username or password." : error.message;
    } finally {
      button.disabled = false;
    }
  });
  main.appendChild(form);
  username.focus();
  return null;
}
