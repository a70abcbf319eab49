// Tables of API objects. `pagedList` asks the API for one page at a time with RabbitMQ's list
// parameters (page, page_size, name, use_regex, sort, sort_reverse, pagination=true) so long
// lists stay cheap; `table` draws an array already fetched, `deleteColumn` its rows' Delete button.

import { api, get, query } from "./api.js";
import { actionButton, el, fill, flash } from "./dom.js";
import { count } from "./format.js";

/** columns: [{title, cell: item => node|text, num?: bool, sort?: "api_field"}] */
export function table(columns, items, { sort, reverse, onSort, emptyText = "Nothing to show." } = {}) {
  if (items.length === 0) return el("p", { class: "empty" }, emptyText);
  const head = columns.map((column) => {
    const classes = [column.num ? "num" : "", column.sort && onSort ? "sortable" : ""];
    if (column.sort && column.sort === sort) classes.push(reverse ? "sorted-desc" : "sorted-asc");
    return el(
      "th",
      { class: classes.join(" ").trim() || null, onclick: column.sort && onSort ? () => onSort(column.sort) : null },
      column.title,
    );
  });
  const rows = items.map((item) =>
    el(
      "tr",
      {},
      columns.map((column) => el("td", { class: column.num ? "num" : column.name ? "name" : null }, column.cell(item))),
    ),
  );
  return el("table", { class: "list" }, el("thead", {}, el("tr", {}, head)), el("tbody", {}, rows));
}

/**
 * A server-paginated list of `path` (e.g. "/queues"), with a name filter, page controls and
 * sortable headers. `refresh()` fetches the current page again.
 */
export function pagedList({ path, columns, sort = "name", pageSize = 100, noun = "items", emptyText }) {
  const state = { page: 1, pageSize, sort, reverse: false, filter: "", regex: false };
  const tableHolder = el("div", { class: "list-body" });
  const summary = el("span", { class: "muted" });
  const pageLabel = el("span", {});
  const previous = el("button", { type: "button", class: "secondary small", onclick: () => go(state.page - 1) }, "‹ Previous");
  const next = el("button", { type: "button", class: "secondary small", onclick: () => go(state.page + 1) }, "Next ›");
  const filterInput = el("input", { type: "text", placeholder: "Filter by name", "aria-label": "Filter by name", style: "max-width:260px" });
  const regexBox = el("input", { type: "checkbox" });
  const sizeSelect = el(
    "select",
    { "aria-label": "Page size" },
    [20, 50, 100, 500].map((n) => el("option", { value: n, selected: n === pageSize }, `${n} per page`)),
  );
  /** A refresh the user asked for (filter, page, sort): errors are shown, not thrown. */
  function refreshNow() {
    // Typing may finish after the user left the page; a removed list has nothing to show.
    if (!node.isConnected) return;
    refresh().catch((error) => flash(error.message, true));
  }

  let typing;
  filterInput.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      state.filter = filterInput.value;
      state.page = 1;
      refreshNow();
    }, 300);
  });
  regexBox.addEventListener("change", () => {
    state.regex = regexBox.checked;
    refreshNow();
  });
  sizeSelect.addEventListener("change", () => {
    state.pageSize = Number(sizeSelect.value);
    state.page = 1;
    refreshNow();
  });

  function go(page) {
    state.page = page;
    refreshNow();
  }

  function onSort(field) {
    if (state.sort === field) state.reverse = !state.reverse;
    else {
      state.sort = field;
      state.reverse = false;
    }
    refreshNow();
  }

  async function refresh() {
    const answer = await get(
      path +
        query({
          page: state.page,
          page_size: state.pageSize,
          name: state.filter,
          use_regex: state.regex ? "true" : "false",
          sort: state.sort,
          sort_reverse: state.reverse ? "true" : "false",
          pagination: "true",
        }),
    );
    // Pagination asked for, so the answer is {items, page, page_count, filtered_count, total_count};
    // a plain array (an API without pagination) is shown whole.
    const items = Array.isArray(answer) ? answer : answer.items;
    const pageCount = Array.isArray(answer) ? 1 : Math.max(answer.page_count, 1);
    const total = Array.isArray(answer) ? answer.length : answer.total_count;
    const filtered = Array.isArray(answer) ? answer.length : answer.filtered_count;
    if (state.page > pageCount) {
      state.page = pageCount;
      return refresh();
    }
    summary.textContent =
      filtered === total ? `${count(total)} ${noun}` : `${count(filtered)} of ${count(total)} ${noun} match`;
    pageLabel.textContent = `Page ${state.page} of ${pageCount}`;
    previous.disabled = state.page <= 1;
    next.disabled = state.page >= pageCount;
    fill(tableHolder, table(columns, items, { sort: state.sort, reverse: state.reverse, onSort, emptyText }));
  }

  const node = el(
    "div",
    { class: "paged-list" },
    el(
      "div",
      { class: "toolbar" },
      filterInput,
      el("label", {}, regexBox, " Regex"),
      summary,
      el("span", { class: "grow" }),
      el("span", { class: "pager" }, previous, pageLabel, next, sizeSelect),
    ),
    tableHolder,
  );
  return { node, refresh };
}

/**
 * A last column whose button (`label`) asks `question(row)`, sends DELETE `apiPath(row)`,
 * says `done(row)` and calls `refreshAll`.
 */
export function deleteColumn(label, question, apiPath, done, refreshAll) {
  return {
    title: "",
    cell: (row) =>
      actionButton(
        label,
        async () => {
          await api("DELETE", apiPath(row));
          flash(done(row));
          await refreshAll();
        },
        { danger: true, small: true, question: question(row) },
      ),
  };
}

/** A permissions table's columns: `whose` (the user, the vhost or both), then the regexps. */
export function permissionColumns(...whose) {
  return [
    ...whose,
    { title: "Configure regexp", name: true, cell: (x) => x.configure },
    { title: "Write regexp", name: true, cell: (x) => x.write },
    { title: "Read regexp", name: true, cell: (x) => x.read },
  ];
}
