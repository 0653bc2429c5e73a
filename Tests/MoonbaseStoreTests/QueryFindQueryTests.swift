import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseStore

/// `FindQuery` from REST parameters and from Lua options: defaults, caps and validation.
@Suite struct QueryFindQueryTests {
    @Test func restDefaultsAndParsing() throws {
        let q = try FindQuery(className: "Post", rest: [
            "where": #"{"likes":{"$gt":1}}"#, "order": "-createdAt, likes", "limit": "20", "skip": "40",
            "keys": "text,author.name", "include": "author", "count": "1",
        ])
        #expect(q.whereClause == json(#"{"likes":{"$gt":1}}"#))
        #expect(q.order == [SortKey(field: "createdAt", descending: true), SortKey(field: "likes", descending: false)])
        #expect(q.limit == 20 && q.skip == 40 && q.count)
        #expect(q.keys == ["text", "author.name"] && q.include == ["author"])
        let d = try FindQuery(className: "Post", rest: [:])
        #expect(d.limit == 100 && d.skip == 0 && !d.count && d.keys == nil && d.whereClause == nil)
    }

    @Test func commaListsTrimAndDropEmptyItems() {
        #expect(FindQuery.commaList("a, b ,,c") == ["a", "b", "c"])
        #expect(FindQuery.commaList("") == [] && FindQuery.commaList(" , ,") == [])
        #expect(FindQuery.commaList("-createdAt") == ["-createdAt"])
        #expect(FindQuery.commaList("é,  ü x ") == ["é", "ü x"])
    }

    @Test func limitIsCappedPerCaller() throws {
        #expect(try FindQuery(className: "Post", rest: ["limit": "5000"]).limit == 1000)
        let lua = try FindQuery(className: "Post", options: ["limit": 50_000], maxLimit: FindQuery.luaMaxLimit)
        #expect(lua.limit == 10_000)
        #expect(try FindQuery(className: "Post", rest: ["limit": "0", "count": "1"]).limit == 0)
    }

    @Test(arguments: [["limit": "-1"], ["limit": "ten"], ["skip": "-5"], ["skip": "1.5"], ["where": "[1]"],
                      ["where": "{bad json"], ["count": "maybe"]] as [[String: String]])
    func rejectsBadNumbersAndWhere(_ params: [String: String]) {
        #expect { try FindQuery(className: "Post", rest: params) } throws: { e in
            let code = (e as? ParseError)?.code
            return code == .invalidQuery || code == .invalidJSON
        }
    }

    @Test(arguments: ["a b", "x;y", "-", "1abc", "a..b"])
    func rejectsBadNames(_ name: String) {
        for key in ["order", "keys", "include"] {
            #expect { try FindQuery(className: "Post", rest: [key: name]) } throws: { ($0 as? ParseError)?.code == .invalidKeyName }
        }
    }

    @Test func rejectsBadClassNames() {
        #expect { try FindQuery(className: "Po st", rest: [:]) } throws: { ($0 as? ParseError)?.code == .invalidClassName }
        #expect { try FindQuery(className: "_Secret", rest: [:]) } throws: { ($0 as? ParseError)?.code == .invalidClassName }
    }

    @Test func luaOptions() throws {
        let q = try FindQuery(className: "Post", options: [
            "where": ["a": 1], "order": ["-likes", "createdAt"], "keys": ["text"], "include": "author", "count": true,
            "master": true, "skip": 3.0,
        ], maxLimit: FindQuery.luaMaxLimit)
        #expect(q.order.map(\.field) == ["likes", "createdAt"] && q.order[0].descending)
        #expect(q.keys == ["text"] && q.include == ["author"] && q.count && q.skip == 3)
        #expect { try FindQuery(className: "Post", options: ["order": 5], maxLimit: 10) } throws: { ($0 as? ParseError)?.code == .invalidQuery }
    }
}
