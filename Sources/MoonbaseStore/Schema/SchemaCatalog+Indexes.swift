import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

extension SchemaCatalog {
    /// Declares indexes on `className` (creating the class if needed), Parse's `indexes` format
    /// (shapes in `IndexSpec`): a new name is created, the same spec again is a no-op, a changed
    /// spec replaces the old index, `{"__op": "Delete"}` drops it; indexes not named are kept.
    /// B-tree specs become expression indexes over `Naming.fieldExpr` (type-aware: rebuilt when a
    /// field's type is first learnt); unique specs are `CREATE UNIQUE INDEX` (existing duplicates
    /// → 137); text specs become an FTS5 table kept in sync by triggers.
    /// - Throws: 105/107 for a bad spec, 137 when a unique index meets duplicates.
    public func setIndexes(_ className: String, _ specs: JSONObject, in tx: WriteTransaction) throws(ParseError) {
        var s = try ensureClass(className, in: tx)
        let actions = try s.planIndexes(specs)
        guard !actions.isEmpty else { return }
        for a in actions {
            switch a {
            case .drop(let name, let old): try drop(className, name: name, old: old, in: tx)
            case .create(let spec):
                if spec.isText {
                    try tx.connection.execute(Naming.ftsDDL(className, spec.name, fields: spec.fields.map(\.path)))
                } else if !spec.isGeoOnly {
                    try tx.connection.execute(Naming.indexDDL(className, spec, fields: s.fields))
                }
            }
        }
        try stage(s, in: tx)
    }

    private func drop(_ className: String, name: String, old: JSONValue, in tx: WriteTransaction) throws(ParseError) {
        if let spec = try? IndexSpec(name: name, json: old), spec.isText {
            try tx.connection.execute(Naming.dropFTSDDL(className, name))
        } else {
            try tx.connection.execute("DROP INDEX IF EXISTS \(Naming.indexName(className, name))")
        }
    }
}
