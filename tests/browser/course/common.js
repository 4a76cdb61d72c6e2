// common.js -- what every course-style page shares, written after the behaviour the
// course's js/common.js has (hmdp-spec section 7), without its frameworks:
//   - API calls under baseURL "/api" with a 2000 ms timeout;
//   - the token read once, at page load, from sessionStorage and sent as `authorization`;
//   - the response rules: success falsy -> reject with errorMsg; HTTP 401 -> reject
//     "请先登录" and go to /login.html after 200 ms; any other HTTP error or a timeout ->
//     reject "服务器异常"; otherwise resolve with the whole Result ({success, data});
//   - query parameters with falsy values are left out (the course's paramsSerializer);
//   - toasts shaped like Element-UI's: .el-message--error / --success, text in
//     .el-message__content.
"use strict";

// The pages' style, from here rather than a .css file: the deploy's nginx config serves
// its web root as text/html (no mime.types), which a browser refuses for a stylesheet.
const style = document.createElement("style");
style.textContent = `
body { margin: 0 auto; max-width: 480px; font-family: "WenQuanYi Micro Hei", sans-serif;
       background: #f4f4f4; color: #333; }
header { background: #ff6633; color: #fff; padding: 16px; }
header h1 { margin: 0 0 6px; font-size: 22px; }
section { background: #fff; margin: 10px 0; padding: 12px 16px; }
a { color: inherit; }
.types { display: grid; grid-template-columns: repeat(5, 1fr); gap: 10px; }
.type-item { text-align: center; font-size: 13px; }
.voucher { border-bottom: 1px solid #eee; padding: 10px 0; display: flex;
           justify-content: space-between; align-items: center; }
.voucher .title { font-weight: bold; }
.voucher .sub { color: #999; font-size: 12px; }
button { border: 0; border-radius: 4px; background: #ff6633; color: #fff; padding: 6px 12px; }
button.disable-btn { background: #ccc; }
input { display: block; width: 90%; margin: 8px 0; padding: 8px; }
.el-message { position: fixed; top: 20px; left: 50%; transform: translateX(-50%);
              padding: 10px 16px; border-radius: 4px; min-width: 240px; z-index: 10; }
.el-message--error { background: #fef0f0; color: #f56c6c; border: 1px solid #fde2e2; }
.el-message--success { background: #f0f9eb; color: #67c23a; border: 1px solid #e1f3d8; }
.el-message__content { margin: 0; }
.empty { color: #999; }
`;
document.head.appendChild(style);

const token = sessionStorage.getItem("token");

function query(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params || {})) {
    if (v) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

async function api(method, path, { params, data } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 2000);
  const headers = {};
  if (token) headers.authorization = token;
  if (data !== undefined) headers["content-type"] = "application/json;charset=UTF-8";
  let res;
  try {
    res = await fetch("/api" + path + query(params), {
      method, headers, signal: ctl.signal,
      body: data === undefined ? undefined : JSON.stringify(data),
    });
  } catch (e) {
    throw "服务器异常";
  } finally {
    clearTimeout(timer);
  }
  if (res.status === 401) {
    setTimeout(() => { location.href = "/login.html"; }, 200);
    throw "请先登录";
  }
  if (!res.ok) throw "服务器异常";
  let result;
  try {
    result = await res.json();
  } catch (e) {
    throw "服务器异常";
  }
  if (!result.success) throw result.errorMsg;
  return result;
}

function toast(kind, msg) {
  const box = document.createElement("div");
  box.className = "el-message el-message--" + kind;
  const p = document.createElement("p");
  p.className = "el-message__content";
  p.textContent = msg;
  box.appendChild(p);
  document.body.appendChild(box);
  setTimeout(() => box.remove(), 3000);
}
const showError = (msg) => toast("error", String(msg));
const showSuccess = (msg) => toast("success", String(msg));

const util = {
  formatPrice(cents) {
    return (cents / 100).toFixed(2);
  },
  getUrlParam(name) {
    return new URLSearchParams(location.search).get(name);
  },
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
