/// Everything the layers above ask of the database, as one value: the composition root builds
/// one (`SQLiteDocumentStore`) and hands it around typed as `any Store`.
public protocol Store: DocumentStore, ChangeFeedStore, AccountStore, FileBlobStore, ConfigStore, MailTokenStore, UsageStore,
    JobHistoryStore, BackupStore, CodeBundleStore {}
