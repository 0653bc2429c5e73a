import MoonbaseCore
import MoonbaseSQLite

/// What the store's `WriteTransaction` extensions need besides the connection: the schema
/// catalog and the clock. Attached to the `Database` (`Database.context`, held weakly) by
/// `SQLiteDocumentStore`, which keeps it alive.
public final class StoreContext: Sendable {
    public let catalog: SchemaCatalog
    public let clock: any HostClock
    /// Role memberships per user, invalidated by `_Role` writes.
    public let roles = RoleCache()
    /// Who hears committed writes (the realtime engine), once installed.
    public let changes = ChangeListenerSlot()

    public init(catalog: SchemaCatalog, clock: any HostClock) {
        self.catalog = catalog
        self.clock = clock
    }
}

extension WriteTransaction {
    /// The store context attached to this transaction's database.
    /// - Throws: 1 when no `SQLiteDocumentStore` is attached to the database.
    public func storeContext() throws(ParseError) -> StoreContext {
        guard let ctx = database.context as? StoreContext else {
            throw ParseError.internalError("no document store is attached to the database")
        }
        return ctx
    }
}
