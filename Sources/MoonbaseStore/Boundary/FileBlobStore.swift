import MoonbaseCore

/// Metadata of uploaded files (the bytes live elsewhere: the file service keeps them on disk).
/// One record per stored name; names are made unique by the caller.
public protocol FileBlobStore: Sendable {
    /// Records a stored file's content type, size (bytes) and creation time (ms).
    func recordFile(name: String, contentType: String, size: Int64, createdAt: Int64) throws(ParseError)
    /// The content type recorded for `name`, or nil when there is no such file.
    func fileContentType(_ name: String) throws(ParseError) -> String?
    /// Forgets `name`; false when there was no record.
    func deleteFileRecord(_ name: String) throws(ParseError) -> Bool
}
