import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

extension QueryCompiler {
    /// `$regex` (POSIX ERE through the connection's `regexp(pattern, text[, options])` function)
    /// with `$options` `i` (case-insensitive) and Parse SDKs' `\Q…\E` literal quoting.
    func regex(_ field: FieldRef, _ raw: JSONValue, options: JSONValue?) throws(ParseError) -> Frag {
        guard let pattern = raw.stringValue else { throw ParseError(.invalidQuery, "$regex needs a string") }
        guard pattern.utf8.count <= Self.maxRegexBytes else {
            throw ParseError(.invalidQuery, "$regex pattern longer than \(Self.maxRegexBytes) bytes")
        }
        var icase = false
        if let options {
            guard let o = options.stringValue else { throw ParseError(.invalidQuery, "$options needs a string") }
            for c in o {
                switch c {
                case "i": icase = true
                default: throw ParseError(.invalidQuery, "unsupported $options flag '\(c)': only 'i' is supported")
                }
            }
        }
        let ere = Self.translateQuotes(pattern)
        if dialect == .postgres { return try pgRegex(field, ere, icase: icase) }
        var binds: [SQLiteValue] = [.text(ere)]
        if icase { binds.append(.text("i")) }
        let args = icase ? "?, value, ?" : "?, value"
        if isArray(field) {
            return anyElement(field, Frag("type='text' AND regexp(\(args))", binds))
        }
        let expr: String
        switch field.kind {
        case .objectId: expr = "objectId"
        case .time: throw ParseError(.invalidQuery, "$regex needs a string field, not \(field.path)")
        case .json:
            switch field.declared {
            case .string?, .object?, nil: expr = field.expr(nil)
            case .array?: expr = field.expr(nil)
            default: throw ParseError(.invalidQuery, "$regex needs a string field; \(field.path) is a \(field.declared!.rawValue)")
            }
        }
        return Frag("regexp(\(icase ? "?, \(expr), ?" : "?, \(expr)"))", binds)
    }

    /// Rewrites `\Q…\E` spans (literal text, as Parse SDKs send for startsWith/contains) into
    /// escaped POSIX ERE. An unterminated `\Q` quotes to the end.
    public static func translateQuotes(_ pattern: String) -> String {
        guard pattern.contains("\\Q") else { return pattern }
        let meta: Set<Character> = [".", "[", "]", "(", ")", "*", "+", "?", "{", "}", "|", "^", "$", "\\"]
        var out = ""
        var rest = Substring(pattern)
        while let q = rest.firstRange(of: "\\Q") {
            out += rest[rest.startIndex..<q.lowerBound]
            rest = rest[q.upperBound...]
            let end = rest.firstRange(of: "\\E")
            let literal = end.map { rest[rest.startIndex..<$0.lowerBound] } ?? rest
            for c in literal {
                if meta.contains(c) { out.append("\\") }
                out.append(c)
            }
            rest = end.map { rest[$0.upperBound...] } ?? rest[rest.endIndex...]
        }
        out += rest
        return out
    }

    /// `{"$text": {"$search": {"$term": "…", "$caseSensitive": false}}}` through the class's
    /// FTS5 index over `field`: every word must occur (prefix match). Words are split on
    /// non-alphanumerics (as FTS5's unicode61 tokenizer does) and quoted, so FTS5 query syntax in
    /// the term is never interpreted.
    func text(_ field: FieldRef, _ raw: JSONValue, state: State) throws(ParseError) -> Frag {
        guard let search = raw["$search"]?.objectValue else {
            throw ParseError(.invalidQuery, "$text needs {\"$search\": {\"$term\": …}}")
        }
        for e in search.entries where !["$term", "$caseSensitive", "$language", "$diacriticSensitive"].contains(e.key) {
            throw ParseError(.invalidQuery, "unknown $search option \(e.key)")
        }
        guard let term = search["$term"]?.stringValue else { throw ParseError(.invalidQuery, "$text $search needs a string $term") }
        guard term.utf8.count <= 1024 else { throw ParseError(.invalidQuery, "$term longer than 1024 bytes") }
        let caseSensitive = search["$caseSensitive"]?.boolValue ?? false
        guard let index = schema.textIndexes.sorted(by: { $0.key < $1.key }).first(where: { $0.value.contains(field.path) }) else {
            throw ParseError(.invalidQuery, "no text index on \(schema.className).\(field.path): declare one with cloud.textIndex or the schema's indexes")
        }
        let words = Self.ftsWords(term)
        guard !words.isEmpty else { throw ParseError(.invalidQuery, "$term has no words to search for") }
        guard words.count <= 32 else { throw ParseError(.invalidQuery, "$term has more than 32 words") }
        if dialect == .postgres { return pgTextSearch(field, indexFields: index.value, words: words, caseSensitive: caseSensitive, state: state) }
        let match = words.map { "\"\($0)\"*" }.joined(separator: " ")
        let table = Naming.ftsTable(schema.className, index.key)
        state.text = TextFilter(ftsTable: table, match: match)
        var f = Frag("rid IN (SELECT rowid FROM \(table) WHERE \(table) MATCH ?)", [.text(match)])
        if caseSensitive {
            for w in words {
                f.sql += " AND instr(\(field.expr(nil)), ?) > 0"
                f.binds.append(.text(w))
            }
        }
        return f
    }

    /// Words of a search term: maximal runs of letters and digits.
    static func ftsWords(_ term: String) -> [String] {
        var words: [String] = []
        var cur = ""
        for c in term {
            if c.isLetter || c.isNumber {
                cur.append(c)
            } else if !cur.isEmpty {
                words.append(cur)
                cur = ""
            }
        }
        if !cur.isEmpty { words.append(cur) }
        return words
    }
}
