/// One pattern segment, parsed.
enum SegmentKind: Equatable {
    case literal(String)
    case param
    case wildcard
}

/// What a registration stores: the pattern, its parameter names and the index of its value
/// in `Router.values` (the trie itself is not generic: no generic metadata on lookups).
@usableFromInline
struct RouteEndpoint: Sendable {
    @usableFromInline let pattern: String
    @usableFromInline let paramNames: [String]
    @usableFromInline let index: Int
}

/// A trie node. Value type all the way down (children live in a dictionary and arrays), so a
/// `Router` copy is an independent snapshot.
@usableFromInline
struct RouteNode: Sendable {
    var literals: [String: RouteNode] = [:]
    /// The parameter child (0 or 1 element; an array gives the recursive struct storage).
    var param: [RouteNode] = []
    /// Endpoints for a trailing `*` at this node, by method.
    var wildcard: [String: RouteEndpoint] = [:]
    /// Endpoints ending exactly here, by method.
    var endpoints: [String: RouteEndpoint] = [:]

    /// Inserts; false if this method+shape is already registered.
    mutating func insert(_ kinds: ArraySlice<SegmentKind>, method: String, endpoint: RouteEndpoint) -> Bool {
        guard let first = kinds.first else {
            if endpoints[method] != nil { return false }
            endpoints[method] = endpoint
            return true
        }
        let rest = kinds.dropFirst()
        switch first {
        case .literal(let s):
            var child = literals[s] ?? RouteNode()
            let ok = child.insert(rest, method: method, endpoint: endpoint)
            literals[s] = child
            return ok
        case .param:
            if param.isEmpty { param.append(RouteNode()) }
            return param[0].insert(rest, method: method, endpoint: endpoint)
        case .wildcard:
            if wildcard[method] != nil { return false }
            wildcard[method] = endpoint
            return true
        }
    }

    private func endpoint(in table: [String: RouteEndpoint], _ method: String) -> RouteEndpoint? {
        table[method] ?? table["*"]
    }

    /// Depth-first search: literal, then parameter, then wildcard. On success `captured` holds
    /// the parameter values in order and the second result is the wildcard's rest (or nil).
    @usableFromInline
    func find(_ segs: ArraySlice<Substring>, method: String,
              captured: inout [Substring]) -> (RouteEndpoint, String?)? {
        guard let first = segs.first else {
            if let ep = endpoint(in: endpoints, method) { return (ep, nil) }
            if let ep = endpoint(in: wildcard, method) { return (ep, "") }
            return nil
        }
        let rest = segs.dropFirst()
        if let child = literals[String(first)], let hit = child.find(rest, method: method, captured: &captured) {
            return hit
        }
        if let child = param.first {
            captured.append(first)
            if let hit = child.find(rest, method: method, captured: &captured) { return hit }
            captured.removeLast()
        }
        if let ep = endpoint(in: wildcard, method) {
            return (ep, segs.joined(separator: "/"))
        }
        return nil
    }

    /// Every method of every route that matches the path.
    func collectMethods(_ segs: ArraySlice<Substring>, into out: inout Set<String>) {
        out.formUnion(wildcard.keys)
        guard let first = segs.first else {
            out.formUnion(endpoints.keys)
            return
        }
        let rest = segs.dropFirst()
        literals[String(first)]?.collectMethods(rest, into: &out)
        param.first?.collectMethods(rest, into: &out)
    }
}
