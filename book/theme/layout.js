// Layout of listings and tables in the 750 px column (with theme/layout.css; checked by
// tools/check_book.py). Added to mdBook's theme through additional-js in book/book.toml,
// so it runs after book.js has highlighted the code.
'use strict';

(function layout() {
    // Listings wrap their long lines in the page (layout.css: white-space: pre-wrap). So
    // that a wrapped line reads as one line, each line becomes a <span class="line"> whose
    // continuations hang under it, indented past the line's own indent: --indent is the
    // line's leading spaces, in ch of the monospace font. The newlines stay text between
    // the spans, so the copy button copies the same text as before.
    const HANG = 4; // ch: a continuation starts this far right of its line's indent

    function splitLines(code) {
        // Each text node, with the chain of highlight.js spans it sits in.
        const pieces = [];
        (function walk(node, chain) {
            for (const child of Array.from(node.childNodes)) {
                if (child.nodeType === Node.TEXT_NODE) pieces.push([child.data, chain]);
                else if (child.nodeType === Node.ELEMENT_NODE) walk(child, chain.concat([child]));
            }
        })(code, []);
        if (!pieces.some(([text]) => text.length > 0)) return;

        const out = document.createDocumentFragment();
        let line = null, lineText = '';
        const finish = () => {
            if (line !== null) {
                const indent = lineText.length - lineText.replace(/^[ \t]+/, '').length;
                line.style.setProperty('--indent', indent + 'ch');
                out.appendChild(line);
            }
            line = null;
            lineText = '';
        };
        for (const [text, chain] of pieces) {
            const parts = text.split('\n');
            parts.forEach((part, k) => {
                if (k > 0) {
                    finish();
                    out.appendChild(document.createTextNode('\n'));
                }
                if (part === '') return;
                if (line === null) {
                    line = document.createElement('span');
                    line.className = 'line';
                }
                // The piece inside copies of the spans it sat in (a highlight.js span
                // that runs over several lines, a block comment, is cut at each newline).
                let node = document.createTextNode(part);
                for (let i = chain.length - 1; i >= 0; i--) {
                    const wrap = chain[i].cloneNode(false);
                    wrap.appendChild(node);
                    node = wrap;
                }
                line.appendChild(node);
                lineText += part;
            });
        }
        finish();
        code.replaceChildren(out);
        code.style.setProperty('--hang', HANG + 'ch');
    }

    for (const code of document.querySelectorAll('main pre > code')) {
        if (code.classList.contains('editable')) continue; // (an editor, none in this book)
        splitLines(code);
    }

    // Tables reflow to the column (layout.css). A long path or identifier in a cell may
    // break after '/', '_', '.', ',' or '::', where the reader expects it, before it breaks
    // anywhere else (overflow-wrap: anywhere, the last resort).
    const BREAK_AFTER = /(::|[\/_.,])(?=[^\/_.,:\s])/g;
    for (const code of document.querySelectorAll('main table code')) {
        for (const text of Array.from(code.childNodes)) {
            if (text.nodeType !== Node.TEXT_NODE || !BREAK_AFTER.test(text.data)) continue;
            BREAK_AFTER.lastIndex = 0;
            const parts = text.data.split(BREAK_AFTER);
            // split() with a group gives text, separator, text, ...: a <wbr> after each separator.
            const frag = document.createDocumentFragment();
            parts.forEach((part, k) => {
                if (part) frag.appendChild(document.createTextNode(part));
                if (k % 2 === 1) frag.appendChild(document.createElement('wbr'));
            });
            code.replaceChild(frag, text);
        }
    }
})();
