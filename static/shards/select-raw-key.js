// The new key's field selects itself on click, for copying (no inline handler: CSP).
document.getElementById("raw-key").addEventListener("click", (event) => event.target.select());
