import { api, clearError, param, setToken, showError } from "./api.js";

const form = document.getElementById("signin-form");
const input = document.getElementById("token");
if (param("expired")) showError("error", "Your token was not accepted; sign in again.");
input.focus();
input.addEventListener("input", () => clearError("error"));

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  clearError("error");
  const value = input.value.trim();
  if (!value) {
    showError("error", "Enter a token.");
    return;
  }
  try {
    await api("/v1/me", { tokenOverride: value });
  } catch (err) {
    showError("error", err.code === "unauthorized" ? "This token is not valid." : err);
    input.select();
    return;
  }
  setToken(value);
  const next = param("next");
  location.href = next && next.startsWith("/ui/") ? next : "index.html";
});
